#!/usr/bin/env python3
"""Lists what a test run skipped, for the last line of `tools/dev.sh test`.

A suite that prints "all tests passed" while the Redis, Prometheus or
container checks did not run says more than it knows. Every skip in this
project prints a line this script recognises:

  gtest    "<file>:<line>: Skipped" then the reason, then "[  SKIPPED ] Suite.Test"
  pytest   "SKIPPED [n] <file>:<line>: <reason>"   (the tests run pytest with -rs)
  scripts  "SKIPPED: <reason>"                     (exit code 77, ctest's SKIP_RETURN_CODE)

Usage:
  skipped_tests.py collect LABEL LASTTEST_LOG >> SKIPS   one line per skip: label, test, reason
  skipped_tests.py summary SKIPS [--ci]                  prints the skip list; with --ci, exits 1
                                                        when a skip is of something CI installs

Under CI every package the suite needs is installed by tools/dev.sh (Redis,
Prometheus) or by tools/container_test.sh (podman), so a skip there means the
check silently stopped running. Only the skips in ENVIRONMENTAL depend on the
machine rather than on what is installed, and stay allowed.
"""
import re
import sys

# Reasons (substrings) a CI machine may legitimately skip for: what it would
# need is hardware or privileges, not a package.
ENVIRONMENTAL = (
    "cannot mount a tmpfs",  # FsConditionTest: needs root with mount rights
    "no CUDA device visible",  # test_gpu_cuda.py: the GPU run is the device check
    "libcudart",  # test_gpu_cuda.py: no CUDA runtime on a machine without a GPU
    "needs PyTorch with a CUDA device",  # test_gpu_torch.py: only the GPU machine has both
)

TEST_HEADER = re.compile(r"^\d+/\d+ Testing: (\S+)")
TEST_VERDICT = re.compile(r"^Test (Passed|Failed|Skipped|Not Run)")
GTEST_SKIPPED_AT = re.compile(r"^\S+:\d+: Skipped$")
GTEST_SKIPPED = re.compile(r"^\[  SKIPPED \] (\S+\.\S+) \(")
PYTEST_SKIPPED = re.compile(r"^SKIPPED \[(\d+)\] (\S+?):\d+: (.*)$")
SCRIPT_SKIPPED = re.compile(r"SKIPPED: (.*)$")


def skips_in_output(lines):
    """Yields (case, reason) for each skip printed in one test's output."""
    reason = None
    expect_reason = False
    for line in lines:
        if expect_reason:
            reason, expect_reason = line.strip(), False
            continue
        if GTEST_SKIPPED_AT.match(line):
            expect_reason = True
            continue
        m = GTEST_SKIPPED.match(line)
        if m:
            yield m.group(1), reason or "(no reason given)"
            reason = None
            continue
        m = PYTEST_SKIPPED.match(line)
        if m:  # pytest folds the tests skipped for one reason into one line
            for i in range(int(m.group(1))):
                yield f"{m.group(2)}#{i + 1}", m.group(3).strip()
            continue
        m = SCRIPT_SKIPPED.search(line)
        if m:
            yield "", m.group(1).strip()


def ctest_sections(log_path):
    """Yields (test, output lines, passed) for each test of a ctest LastTest.log.

    ctest writes each test as a header line ("n/N Testing: name"), its
    output up to "<end of output>", then its verdict ("Test Passed.",
    "Test Failed.", ...)."""
    test, output, ended = None, [], False
    with open(log_path, errors="replace") as log:
        for raw in log:
            line = raw.rstrip("\n")
            m = TEST_HEADER.match(line)
            if m:
                test, output, ended = m.group(1), [], False
            elif line == "<end of output>" and test:
                ended = True
            elif ended and test and TEST_VERDICT.match(line):
                yield test, output, not line.startswith("Test Failed")
                test, ended = None, False
            elif test and not ended:
                output.append(line)


def collect(label, log_path):
    """Prints label<TAB>test<TAB>reason for every skip in a ctest LastTest.log."""
    for test, output, _ in ctest_sections(log_path):
        # gtest prints the list of skipped tests again after its summary;
        # each case is reported once.
        seen = set()
        for case, reason in skips_in_output(output):
            name = f"{test} {case}".strip()
            if (name, reason) not in seen:
                seen.add((name, reason))
                print(f"{label}\t{name}\t{reason}")


def summary(path, ci):
    """Prints one line per distinct (label, test binary, reason), with a count."""
    groups = {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                continue
            label, name, reason = parts
            binary = name.split(" ")[0]
            groups.setdefault((label, binary, reason), []).append(name)
    if not groups:
        print("skipped: nothing")
        return 0
    count = sum(len(v) for v in groups.values())
    print(f"skipped: {count} check{'' if count == 1 else 's'}")
    not_allowed = 0
    for (label, binary, reason), names in sorted(groups.items()):
        allowed = any(s in reason for s in ENVIRONMENTAL)
        not_allowed += 0 if allowed else len(names)
        cases = f" ({len(names)} cases)" if len(names) > 1 else ""
        mark = "" if allowed or not ci else "  <- CI installs this: a failure under CI=true"
        print(f"  {label}: {binary}{cases}: {reason}{mark}")
    return 1 if ci and not_allowed else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "collect":
        collect(argv[2], argv[3])
        return 0
    if len(argv) in (3, 4) and argv[1] == "summary":
        return summary(argv[2], ci=argv[3:] == ["--ci"])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
