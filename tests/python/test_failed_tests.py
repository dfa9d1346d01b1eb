"""tools/failed_tests.py and skipped_tests.py's reader of ctest's log.

The log is a real one: ctest runs a CTestTestfile.cmake written here (ctest
reads it as a configured build tree's), whose tests print what a failing
gtest binary, a failing pytest run and a sanitizer report print, and one
passing test; so the parser is checked against ctest's own format, not a
copy of it.
"""
import pathlib
import shutil
import subprocess
import sys

import pytest

_TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(_TOOLS))
import failed_tests  # noqa: E402
import skipped_tests  # noqa: E402

GTEST_FAILURE = """[ RUN      ] HttpTest.MemoryPressure
{noise}tests/integration/http_test.cc:177: Failure
Expected equality of these values:
  health->status
    Which is: 200
  503
[  FAILED  ] HttpTest.MemoryPressure (12 ms)
[==========] 3 tests ran.
[  FAILED  ] 1 test, listed below:
[  FAILED  ] HttpTest.MemoryPressure
"""
PYTEST_FAILURE = """{noise}    def test_a_stray_sigusr1():
>       assert "no successor waiting" in a.log(), a.log()
E       AssertionError: the log holds only the start-up lines
tests/python/test_warm_restart.py:317: AssertionError
FAILED tests/python/test_warm_restart.py::test_a_stray_sigusr1 - AssertionError
1 failed, 3 passed in 9.1s
"""
TSAN_REPORT = """{noise}==================
WARNING: ThreadSanitizer: data race (pid=4242)
  Write of size 8 at 0x7b04 by thread T2:
    #0 lmcache::Foo::Bar() src/foo.cc:10
SUMMARY: ThreadSanitizer: data race src/foo.cc:10 in lmcache::Foo::Bar()
==================
"""


@pytest.fixture(scope="module")
def ctest_log(tmp_path_factory):
    ctest = shutil.which("ctest")
    if ctest is None:
        pytest.fail("ctest not found (cmake is a build dependency)")
    tree = tmp_path_factory.mktemp("ctest_tree")
    noise = "".join(f"line {i} of a long output\n" for i in range(300))
    tests = {"gtest_fails": GTEST_FAILURE, "pytest_fails": PYTEST_FAILURE,
             "tsan_fails": TSAN_REPORT}
    lines = ['add_test(passes "/bin/sh" "-c" "echo fine")']
    for name, text in tests.items():
        path = tree / f"{name}.txt"
        path.write_text(text.format(noise=noise))
        lines.append(f'add_test({name} "/bin/sh" "-c" "cat {path}; exit 1")')
    (tree / "CTestTestfile.cmake").write_text("\n".join(lines) + "\n")
    run = subprocess.run([ctest, "--test-dir", str(tree)], capture_output=True, text=True)
    assert run.returncode != 0, run.stdout
    log = tree / "Testing" / "Temporary" / "LastTest.log"
    assert log.exists(), run.stdout
    return log


def test_each_failed_test_is_reported_with_its_failure_lines_and_tail(ctest_log, capsys):
    assert failed_tests.report("build", ctest_log) == 1
    out = capsys.readouterr().out
    assert "passes" not in out
    for name in ("gtest_fails", "pytest_fails", "tsan_fails"):
        assert f"=== FAILED: build: {name} ===" in out
    # The assertion itself, with what explains it, though it sits 300 lines
    # above the end of its test's output.
    assert "http_test.cc:177: Failure" in out and "Which is: 200" in out
    assert "E       AssertionError: the log holds only the start-up lines" in out
    assert "WARNING: ThreadSanitizer: data race" in out and "src/foo.cc:10" in out
    # Trimmed: the noise is not repeated wholesale.
    assert out.count("of a long output") <= 3 * failed_tests.TAIL_LINES


def test_the_sections_reader_sees_every_test_and_its_verdict(ctest_log):
    verdicts = {test: passed for test, _, passed in skipped_tests.ctest_sections(ctest_log)}
    assert verdicts == {"passes": True, "gtest_fails": False, "pytest_fails": False,
                        "tsan_fails": False}


def test_a_run_without_failures_reports_nothing(tmp_path, capsys):
    ctest = shutil.which("ctest")
    (tmp_path / "CTestTestfile.cmake").write_text('add_test(passes "/bin/sh" "-c" "echo fine")\n')
    subprocess.run([ctest, "--test-dir", str(tmp_path)], capture_output=True, check=True)
    assert failed_tests.report("build", tmp_path / "Testing/Temporary/LastTest.log") == 0
    assert capsys.readouterr().out == ""
