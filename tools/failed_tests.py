#!/usr/bin/env python3
"""The failed tests of a ctest run, trimmed to what names the cause, for the
end of `tools/dev.sh test`: a CI excerpt shows the last lines of a run, and
ctest's own --output-on-failure puts a failing assertion hundreds of lines
above them.

Usage:
  failed_tests.py LABEL LASTTEST_LOG   prints each failed test of the run:
                                       its failure lines (gtest, pytest,
                                       sanitizers, uncaught exceptions) with
                                       the lines that explain them, then the
                                       last lines of its output; exits 1 if
                                       any test failed, else 0
"""
import re
import sys

from skipped_tests import ctest_sections

# A line that says what failed, and how many lines after it explain it.
FAILURE_MARKERS = (
    (re.compile(r": Failure$"), 6),  # gtest: "file:line: Failure" then expected/actual
    (re.compile(r"^\[  FAILED  \] \S+\.\S+ \("), 0),
    (re.compile(r"^>\s{3}"), 0),  # pytest: the failing statement
    (re.compile(r"^E\s{3}"), 0),  # pytest: what it found
    (re.compile(r"^(FAILED|ERROR) \S+\.py"), 0),  # pytest's short summary
    (re.compile(r"^\S+\.py:\d+: \w*(Error|Exception)"), 0),
    (re.compile(r"(ERROR|WARNING): (Address|Leak|Thread|UndefinedBehavior)Sanitizer"), 12),
    (re.compile(r"runtime error: "), 4),
    (re.compile(r"^SUMMARY: "), 0),
    (re.compile(r"C\+\+ exception|terminate called|Assertion .* failed|Check failed"), 3),
    (re.compile(r"\*\*\*Timeout|Timeout after"), 0),
)
MAX_FAILURE_LINES = 60
TAIL_LINES = 25
MAX_LINE = 400


def failure_lines(output):
    """The lines of `output` that say what failed, each with its explanation."""
    picked, until = [], -1
    for i, line in enumerate(output):
        for pattern, after in FAILURE_MARKERS:
            if pattern.search(line):
                until = max(until, i + after)
                break
        if i <= until:
            picked.append(line)
            if len(picked) >= MAX_FAILURE_LINES:
                picked.append(f"... ({len(output) - i - 1} more lines)")
                break
    return picked


def clip(line):
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + " ..."


def report(label, log_path, out=None):
    out = out or sys.stdout
    failed = 0
    for test, output, passed in ctest_sections(log_path):
        if passed:
            continue
        failed += 1
        print(f"=== FAILED: {label}: {test} ===", file=out)
        lines = failure_lines(output)
        if lines:
            print("--- what failed:", file=out)
            for line in lines:
                print(clip(line), file=out)
        print(f"--- its last {min(TAIL_LINES, len(output))} lines:", file=out)
        for line in output[-TAIL_LINES:]:
            print(clip(line), file=out)
    return 1 if failed else 0


def main(argv):
    if len(argv) == 3:
        return report(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
