#!/usr/bin/env python3
"""The fleet's last copy evicted last (issue 43, section 3): the fleet-wide
hit rate of 4 real servers with the last-copy bias and without it, on the
same trace, in the same run.

Two fleets of N servers (default 4) on loopback, each server listing the
other three, directed lookups: fleet "bias" runs with --p2p-last-copy-bias
(default 4, the server's default), fleet "lru" with 0 (plain LRU), all else
equal. The trace: prompts of --chunks chunks drawn from a working set of
--working-set x one node's L1 (objects), each request on a node drawn at
random. Every request goes to both fleets, alternating which goes first,
and does what a vLLM worker does: lookup (the node's L1, then the peers its directory names,
through the prefetch), retrieve what was found (which releases the lookup's
locks and counts as a use), then store what was not (recomputed). A
request's hit is the chunks its lookup found, from the node's own L1 or
from a peer; the fleet-wide hit rate is hits over chunks asked, counted
after --warmup requests. Each trial starts fresh fleets with its own seed;
the summary gives each trial's rates, the medians and the spread of the
difference.

  tools/last_copy_bench.py [--trials 3] [--requests 3000] [--warmup 1000]
                           [--working-set 2.0] [--zipf 0] [--bias 4] [--l1-gb 0.05]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402
import zmq  # noqa: E402

from fleet_scale import Fleet  # noqa: E402
from mp_client import (OP_COMMIT_RETRIEVE, OP_COMMIT_STORE, OP_PREPARE_RETRIEVE,  # noqa: E402
                       OP_PREPARE_STORE, chunk_size, lookup_l2, make_key, random_tokens,
                       slot_view, stats)

def store_missing(client, pool, instance, tokens, chunks, request_id, rng):
    """prepare_store of the whole prompt: the server stages only the chunks
    it does not hold; writes them and commits."""
    chunk = chunk_size(client)
    key = make_key(tokens, 0, chunks * chunk, request_id)
    prepared = client.call(OP_PREPARE_STORE, key, instance)
    for slot in prepared["context"]["slots"]:
        view = slot_view(pool, slot)
        view[...] = rng.integers(0, 2**16, size=view.shape, dtype=np.uint16)
    assert client.call(OP_COMMIT_STORE, key, instance, b"") is True
    return len(prepared["context"]["slots"])


def retrieve_found(client, instance, tokens, found, request_id):
    """prepare_retrieve + commit of the chunks a lookup found (its locks)."""
    if found == 0:
        return
    chunk = chunk_size(client)
    key = make_key(tokens, 0, found * chunk, request_id)
    prepared = client.call(OP_PREPARE_RETRIEVE, key, instance)
    assert prepared["success"] is True, prepared
    assert client.call(OP_COMMIT_RETRIEVE, key, instance) is True


class Arm:
    """One fleet and what it scored."""

    def __init__(self, name, fleet):
        self.name, self.fleet = name, fleet
        self.asked = self.hits = self.remote_before = 0
        self.rng = np.random.default_rng(0)

    def request(self, node, tokens, chunks, request_id, count):
        client, instance, pool = self.fleet.workers[node]
        found = lookup_l2(client, tokens, request_id, timeout_s=60, poll_s=0.002)
        retrieve_found(client, instance, tokens, found, request_id)
        store_missing(client, pool, instance, tokens, chunks, request_id, self.rng)
        if count:
            self.asked += chunks
            self.hits += found

    def remote_found(self):
        return sum(self.fleet.p2p(i)["lookups"]["found_chunks"]
                   for i in range(len(self.fleet.workers)))

    def evictions(self):
        out = {"spared": 0, "expendable": 0, "evicted": 0}
        for client, _, _ in self.fleet.workers:
            ev = stats(client)["eviction"]
            out["spared"] += ev.get("last_copies_spared", 0)
            out["expendable"] += ev.get("last_copy_expendable", 0)
            out["evicted"] += ev.get("background_evicted_objects", 0)
        return out


def trace(args, rng, prompts):
    """(node, prompt index) per request: uniform, or Zipf-like with --zipf s."""
    n = len(prompts)
    if args.zipf > 0:
        weights = 1.0 / np.arange(1, n + 1) ** args.zipf
        weights /= weights.sum()
        picks = rng.choice(n, size=args.requests, p=weights)
    else:
        picks = rng.integers(0, n, size=args.requests)
    nodes = rng.integers(0, args.nodes, size=args.requests)
    return list(zip(nodes.tolist(), picks.tolist()))


def trial(args, seed, ctx):
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as da, tempfile.TemporaryDirectory() as db:
        common = ["--l1-size-gb", str(args.l1_gb)]
        arms = [Arm("bias", Fleet(Path(da), args.nodes, "directed", ctx,
                                  extra=common + ["--p2p-last-copy-bias", str(args.bias)])),
                Arm("lru", Fleet(Path(db), args.nodes, "directed", ctx,
                                 extra=common + ["--p2p-last-copy-bias", "0"]))]
        try:
            client = arms[0].fleet.workers[0][0]
            chunk = chunk_size(client)
            l1 = stats(client)["l1"]
            object_bytes = 2 * 2 * chunk * 128 * 2  # mp_client's slot shape, bfloat16
            per_node = int(l1["capacity_bytes"] // object_bytes)
            working_chunks = int(args.working_set * per_node)
            prompts = [random_tokens(rng, args.chunks * chunk)
                       for _ in range(max(1, working_chunks // args.chunks))]
            started = time.monotonic()
            for r, (node, p) in enumerate(trace(args, rng, prompts)):
                count = r >= args.warmup
                if r == args.warmup:
                    for arm in arms:
                        arm.remote_before = arm.remote_found()
                order = arms if r % 2 == 0 else arms[::-1]
                for arm in order:
                    arm.request(node, prompts[p], args.chunks, f"{arm.name}-{seed}-{r}", count)
            took = time.monotonic() - started
            result = {"per_node_objects": per_node, "prompts": len(prompts), "seconds": took}
            for arm in arms:
                result[arm.name] = {"rate": arm.hits / arm.asked,
                                    "remote": (arm.remote_found() - arm.remote_before) / arm.asked,
                                    **arm.evictions()}
            return result
        finally:
            for arm in arms:
                arm.fleet.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--l1-gb", type=float, default=0.05,
                        help="each server's L1 (--l1-size-gb); objects are 256 KiB")
    parser.add_argument("--working-set", type=float, default=2.0,
                        help="distinct chunks of the trace, in multiples of one node's L1")
    parser.add_argument("--zipf", type=float, default=0.0,
                        help="popularity exponent (0: uniform)")
    parser.add_argument("--bias", type=float, default=4.0,
                        help="--p2p-last-copy-bias of the bias fleet")
    args = parser.parse_args()
    ctx = zmq.Context()
    rows = []
    for t in range(args.trials):
        r = trial(args, 4300 + t, ctx)
        rows.append(r)
        print(f"trial {t}: {r['prompts']} prompts of {args.chunks} chunks over "
              f"{args.nodes} nodes of {r['per_node_objects']} objects, "
              f"{args.requests - args.warmup} requests counted ({r['seconds']:.0f} s): "
              f"hit rate bias {r['bias']['rate']:.3f} (remote {r['bias']['remote']:.3f}) "
              f"lru {r['lru']['rate']:.3f} (remote {r['lru']['remote']:.3f}); "
              f"bias evictions {r['bias']['evicted']}, expendable {r['bias']['expendable']}, "
              f"spared {r['bias']['spared']}", flush=True)
    bias = [r["bias"]["rate"] for r in rows]
    lru = [r["lru"]["rate"] for r in rows]
    diff = [b - a for b, a in zip(bias, lru)]
    print(f"\nfleet-wide hit rate, median (min..max) of {len(rows)} trials: "
          f"bias {statistics.median(bias):.3f} ({min(bias):.3f}..{max(bias):.3f}), "
          f"lru {statistics.median(lru):.3f} ({min(lru):.3f}..{max(lru):.3f}); "
          f"bias - lru {statistics.median(diff):+.3f} ({min(diff):+.3f}..{max(diff):+.3f})")


if __name__ == "__main__":
    main()
