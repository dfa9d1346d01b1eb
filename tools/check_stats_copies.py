#!/usr/bin/env python3
"""Refuses a Stats() body that copies a component's counters by hand.

A component's counters live in a struct the stats lists generate
(stats/declare.h: LMC_STATS_COUNTERS, LMC_STATS_COUNTED), copied into the
snapshot by its CopyTo or AddTo; totals of several structs of one list come
from LMC_STATS_SUM. A body that reads its own atomics member by member,

    s.gaps = gaps_.load(std::memory_order_relaxed);
    out.sealed_total += sealed_total_.load(...);
    s.store_latency = store_latency_.Take();

is the hand copy that lets a new counter reach the struct and miss the
snapshot (issue 65, section 5). Measuring a gauge when asked (a size, a
peer's flag: `p->stale.load()`) is not a copy and passes.

    check_stats_copies.py SRC_DIR     exit 1 naming each hand copy
    check_stats_copies.py --self-test the check against known bad and good bodies
"""
import pathlib
import re
import sys

# A function whose name says it reports figures: Stats(), GuardStats(),
# EtcdTotals(), ... defined with a body (const or not).
FUNCTION = re.compile(r"\b(\w*(?:Stats|Totals))\(\)\s*(?:const\s*)?(?:LMC_\w+\([^)]*\)\s*)*\{")
# `<target>.<member> = <member_>.load(` or `.Take(`: a member of this object
# (trailing underscore) read into a field of what is returned.
HAND_COPY = re.compile(
    r"\b\w+(?:\.|->)\w+(?:\.\w+)*\s*\+?=\s*\w+_\s*\.\s*(?:load|Take)\s*\(")


def bodies(text):
    """Yields (function name, line number, body) of each figure function."""
    for match in FUNCTION.finditer(text):
        depth, i = 1, match.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        yield match.group(1), text.count("\n", 0, match.start()) + 1, text[match.end():i]


def hand_copies(text):
    found = []
    for name, line, body in bodies(text):
        for copy in HAND_COPY.finditer(body):
            found.append((name, line + body.count("\n", 0, copy.start()), copy.group(0)))
    return found


def check(root):
    failures = 0
    for path in sorted(pathlib.Path(root).rglob("*")):
        if path.suffix not in (".cc", ".h"):
            continue
        for name, line, what in hand_copies(path.read_text(encoding="utf-8")):
            print(f"{path}:{line}: {name}() copies a counter by hand: `{what}` "
                  "(declare it on the component's stats list and CopyTo/AddTo it)")
            failures += 1
    return failures


BAD = """
FooStats Foo::Stats() const {
  FooStats s;
  s.applied = applied_.load(std::memory_order_relaxed);
  out.total += total_.load(std::memory_order_relaxed);
  s.latency = latency_.Take();
  return s;
}
"""
GOOD = """
FooStats Foo::Stats() const LMC_EXCLUDES(mu_) {
  FooStats s;
  counters_.CopyTo(&s);
  for (const auto& p : peers) s.stale += p->stale.load(std::memory_order_relaxed) ? 1 : 0;
  s.size = table_.size();
  return s;
}
void Foo::Record() { last_ = value_.load(); }
"""


def self_test():
    bad = hand_copies(BAD)
    good = hand_copies(GOOD)
    ok = len(bad) == 3 and not good
    print(f"self-test: {len(bad)} of 3 hand copies found in the bad body, "
          f"{len(good)} in the good one: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    failures = check(argv[1])
    if failures:
        print(f"{failures} hand copies of counters")
        return 1
    print("no Stats() body copies a counter by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
