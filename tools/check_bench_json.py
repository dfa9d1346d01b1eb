#!/usr/bin/env python3
"""Checks that an lmcache-bench JSON report is complete, and that its shm rounds took no page faults.

Usage: check_bench_json.py REPORT.json

Every headline field of docs/performance.md must be present, in order, and a
positive finite number (so no phase was skipped); every ratio's spread must be ordered with its median
equal to the headline; there is one sample per round; the parameters and
machine sections must be there. No speed is asserted, but every timed round of
the shared-memory path must take at most MAX_FAULTS_PER_MIB page faults per MiB.
Exit status 0 when complete, 1 with the reason otherwise.
"""
import json
import math
import sys

FIELDS = [
    "memcpy_gbps", "store_gbps", "retrieve_gbps", "socket_store_gbps",
    "socket_retrieve_gbps", "redis_store_gbps", "redis_retrieve_gbps", "ping_p50_us",
    "zmq_echo_p50_us", "lookup_p50_us", "lookup_server_us", "lookup_decode_us",
    "lookup_hash_us", "lookup_lock_us", "store_vs_memcpy", "retrieve_vs_memcpy",
    "shm_vs_socket", "shm_vs_redis", "ping_vs_echo", "lookup_cold_p50_us",
    "shared_prefix_lookup_p50_us", "shared_prefix_hit_fraction", "l2_store_gbps",
    "l2_load_gbps", "disk_write_gbps", "disk_read_gbps", "l2_store_vs_disk", "l2_load_vs_disk",
    "l2_index_rebuild_seconds", "l2_index_rebuild_objects", "resp_store_gbps", "resp_load_gbps",
    "raw_redis_set_gbps", "raw_redis_get_gbps", "resp_store_vs_raw", "resp_load_vs_raw",
    "cross_node_gbps", "s3_store_gbps", "s3_load_gbps", "raw_s3_put_gbps", "raw_s3_get_gbps",
    "s3_store_vs_raw", "s3_load_vs_raw", "s3_cross_node_gbps", "store_faults_per_mib", "retrieve_faults_per_mib",
    "stream_copy_gbps", "store_vs_stream_copy", "retrieve_vs_stream_copy",
    "events_off_store_gbps", "events_on_store_gbps", "events_on_vs_off", "events_small_on_vs_off",
    "journal_on_vs_off", "journal_small_on_vs_off", "quota_on_vs_off", "quota_small_on_vs_off",
    "restart_serve_seconds", "restart_takeover_seconds", "restart_served_fraction",
    "recovery_serve_seconds", "recovery_seconds", "recovered_fraction",
    "p2p_load_gbps", "p2p_ucp_get_gbps", "p2p_ucp_am_bw_gbps", "p2p_redis_load_gbps",
    "p2p_unverified_load_gbps", "p2p_verified_vs_unverified",
    "p2p_vs_ucp_get", "p2p_vs_ucp_am_bw", "p2p_vs_redis", "p2p_owner_cpu_s_per_gb",
    "ttr_peer_ms", "ttr_l1_ms", "ttr_fs_ms",
    "chunk1_store_ns_per_token", "chunk256_store_ns_per_token", "chunk1_lookup_ns_per_token",
    "chunk256_lookup_ns_per_token", "chunk1_store_vs_256", "chunk1_lookup_vs_256",
]
# Fields that may be zero (every other field is a positive rate or time):
# counts, and a lookup's stages, whose means a short --quick prompt may
# round to 0 us.
MAY_BE_ZERO = {"store_faults_per_mib", "retrieve_faults_per_mib", "lookup_decode_us",
               "lookup_hash_us", "lookup_lock_us"}
# The guard: page faults per MiB moved that a timed round of the shared-memory
# path may take, workers and server together. A copy into or out of a mapped,
# resident pool takes none; 1 MiB of untouched 4 KiB pages takes 256.
MAX_FAULTS_PER_MIB = 4.0
SPREADS = ["store_vs_memcpy", "retrieve_vs_memcpy", "store_vs_stream_copy",
           "retrieve_vs_stream_copy", "shm_vs_socket", "shm_vs_redis",
           "ping_vs_echo", "l2_store_vs_disk", "l2_load_vs_disk", "resp_store_vs_raw",
           "resp_load_vs_raw", "s3_store_vs_raw", "s3_load_vs_raw", "events_on_vs_off", "events_small_on_vs_off",
           "journal_on_vs_off", "journal_small_on_vs_off", "quota_on_vs_off",
           "quota_small_on_vs_off", "p2p_vs_ucp_get", "p2p_vs_ucp_am_bw",
           "p2p_vs_redis", "p2p_verified_vs_unverified", "chunk1_store_vs_256",
           "chunk1_lookup_vs_256"]


def check(path):
    with open(path) as f:
        report = json.load(f)
    problems = []
    if report.get("schema") != "lmcache-bench/2":
        problems.append("schema is %r, expected 'lmcache-bench/2'" % report.get("schema"))
    for section in ("machine", "parameters", "skipped", "results", "spread", "samples", "restart",
                    "sweep"):
        if section not in report:
            problems.append("missing section %r" % section)
    # A phase this machine could not run leaves its fields null: complete
    # means every phase ran.
    for phase, reason in report.get("skipped", {}).items():
        problems.append("the %s phase was skipped: %s" % (phase, reason))
    results = report.get("results", {})
    if list(results) != FIELDS:
        problems.append("result fields %s differ from the documented set %s" % (list(results), FIELDS))
    for name in FIELDS:
        value = results.get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            problems.append("%s is %r, not a number" % (name, value))
        elif not math.isfinite(value) or value < 0 or (value == 0 and name not in MAY_BE_ZERO):
            problems.append("%s is %r, not a positive finite number" % (name, value))
    spread = report.get("spread", {})
    for name in SPREADS:
        s = spread.get(name)
        if not isinstance(s, dict) or set(s) != {"min", "median", "max"}:
            problems.append("spread of %s is %r, not {min, median, max}" % (name, s))
        elif not (0 < s["min"] <= s["median"] <= s["max"]):
            problems.append("spread of %s is not ordered and positive: %r" % (name, s))
        elif abs(s["median"] - results.get(name, -1)) > 1e-6 * max(1.0, s["median"]):
            problems.append("median of %s differs from its headline figure" % name)
    rounds = report.get("parameters", {}).get("rounds")
    for name, values in report.get("samples", {}).items():
        if len(values) != rounds:
            problems.append("%d samples of %s for %r rounds" % (len(values), name, rounds))
    problems += fault_problems(report.get("samples", {}))
    return problems


def fault_problems(samples):
    """A page fault on the shared-memory path is a bug: every timed round must stay under the cap."""
    problems = []
    for name in ("store_faults_per_mib", "retrieve_faults_per_mib"):
        for round_index, value in enumerate(samples.get(name, [])):
            if value > MAX_FAULTS_PER_MIB:
                problems.append("round %d of the shm path took %.1f page faults per MiB in %s "
                                "(more than %.0f): the pool is not mapped and resident before the "
                                "copies (docs/performance.md)" % (round_index + 1, value,
                                                                  name.replace("_faults_per_mib", ""),
                                                                  MAX_FAULTS_PER_MIB))
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
