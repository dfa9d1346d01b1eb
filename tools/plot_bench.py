#!/usr/bin/env python3
"""Plots lmcache-bench throughput against prompt size.

Usage: plot_bench.py REPORT.json OUT.png

REPORT.json must come from `lmcache-bench --sweep T1,T2,... --json REPORT.json`.
Draws store and retrieve throughput of the shared-memory, socket and Redis
paths for every prompt size of the sweep, with memcpy as the physical line.
Needs Debian's python3-matplotlib.
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip())
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench.py needs matplotlib: apt-get install python3-matplotlib")
        return 1
    with open(sys.argv[1]) as f:
        report = json.load(f)
    points = sorted(report["sweep"], key=lambda p: p["tokens_per_prompt"])
    if not points:
        print("the report has no sweep: run lmcache-bench with --sweep 1024,4096,...")
        return 1
    tokens = [p["tokens_per_prompt"] for p in points]
    params = report["parameters"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, direction in zip(axes, ("store", "retrieve")):
        ax.plot(tokens, [p["memcpy_gbps"] for p in points], "k--", label="memcpy (same bytes, same threads)")
        ax.plot(tokens, [p[direction + "_gbps"] for p in points], "o-", label="lmcache-server shared memory")
        ax.plot(tokens, [p["socket_" + direction + "_gbps"] for p in points], "s-", label="copy through ZMQ socket")
        redis = [p["redis_" + direction + "_gbps"] for p in points]
        if all(v is not None for v in redis):
            ax.plot(tokens, redis, "^-", label="Redis (hiredis, unix socket)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens per prompt")
        ax.set_title(direction)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("GB/s (10^9 bytes/s)")
    axes[0].legend(loc="best", fontsize=8)
    fig.suptitle("lmcache-bench: %d workers, %d bytes/token, %d-token chunks, median of %d rounds (%s, %d cores)"
                 % (params["workers"], params["bytes_per_token"], params["chunk_size"], params["rounds"],
                    report["machine"]["cpu"], report["machine"]["cores"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print("wrote " + sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
