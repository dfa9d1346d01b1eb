#!/usr/bin/env python3
"""Checks that an lmcache-bench JSON report is complete (no speed assertions).

Usage: check_bench_json.py REPORT.json

Every headline field of docs/performance.md must be present, in order, and a
positive finite number; the parameters and machine sections must be there.
Exit status 0 when complete, 1 with the reason otherwise.
"""
import json
import math
import sys

FIELDS = [
    "memcpy_gbps", "store_gbps", "retrieve_gbps", "socket_store_gbps",
    "socket_retrieve_gbps", "redis_store_gbps", "redis_retrieve_gbps", "ping_p50_us",
    "zmq_echo_p50_us", "lookup_p50_us", "store_vs_memcpy", "retrieve_vs_memcpy",
    "shm_vs_socket", "shm_vs_redis", "ping_vs_echo",
]


def check(path):
    with open(path) as f:
        report = json.load(f)
    problems = []
    if report.get("schema") != "lmcache-bench/1":
        problems.append("schema is %r, expected 'lmcache-bench/1'" % report.get("schema"))
    for section in ("machine", "parameters", "results", "samples", "sweep"):
        if section not in report:
            problems.append("missing section %r" % section)
    results = report.get("results", {})
    if list(results) != FIELDS:
        problems.append("result fields %s differ from the documented set %s" % (list(results), FIELDS))
    for name in FIELDS:
        value = results.get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            problems.append("%s is %r, not a number" % (name, value))
        elif not math.isfinite(value) or value <= 0:
            problems.append("%s is %r, not a positive finite number" % (name, value))
    return problems


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip())
        return 2
    problems = check(sys.argv[1])
    for problem in problems:
        print("incomplete report: " + problem)
    if not problems:
        print("%s: all %d fields present" % (sys.argv[1], len(FIELDS)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
