#!/usr/bin/env python3
"""A model of a fleet of lmcache-servers sharing through directed lookups
(issue 43, section 4), checked against real servers on this machine.

The model (`model()`) gives, per node, for a fleet of N nodes: the
directory's memory, the feed's calls and bytes per second (each node reads
every other node's chunk log every --p2p-directory-poll), the lookup
messages per miss under broadcast and directed lookups, what a joining
node costs (every peer lists it, it lists every peer), and how long a
departed node takes to be forgotten. Its constants are this code's: 2.5
bytes of filter per chunk (fleet/chunk_filter.h at its 80 % sizing), 8
bytes per chunk id on the wire (fleet/chunk_feed_codec.h), the measured
bytes of an empty page and of a record's framing (calibrated below).

The validation (`--nodes N`, default 10) starts N real servers on loopback
(small pools, every server listing every other, `--p2p-lookup directed`),
lets each store prompts, and measures what the model predicts for that N:
the feed's calls and bytes per second at rest and while storing, the
directory's memory, the RPCs a lookup makes for a prompt one peer holds
and for one nobody holds, the same under broadcast (one more fleet), and
the time for a killed node to leave every directory. It prints the
measurements beside the model's figures, then the model at 100 and 1000
nodes; docs/scaling.md records a run.

  tools/fleet_scale.py [--nodes 10] [--prompts 8] [--chunks 4] [--seconds 5]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))

import numpy as np  # noqa: E402
import zmq  # noqa: E402

import mp_client  # noqa: E402
from mp_client import (Client, chunk_size, free_tcp_ports, lookup_l2, map_pool,  # noqa: E402
                       new_instance_id, random_tokens, register, stats, store_prompt)
from test_p2p_owner import write_key  # noqa: E402

FILTER_BYTES_PER_CHUNK = 2.5  # 16-bit fingerprints, filters sized for 80 % load
ID_BYTES = 8                  # a chunk id in a page or a listing
FALSE_POSITIVE = 8 / 65536    # per filter asked: two buckets of four 16-bit fingerprints


def model(nodes, chunks_per_node=1_000_000, admissions_per_s=10_000, poll_s=0.1,
          empty_page_bytes=50, request_bytes=40, record_bytes=12, chunks_per_record=4,
          probe_interval_s=5, probe_timeout_s=3, etcd_ttl_s=10):
    """Per-node figures for a fleet of `nodes` (see the module's docstring).
    In steady state each node evicts what it admits; a record carries one
    table callback's chunks (`chunks_per_record`: a stored prompt's batch).
    The byte constants are the encoded sizes; the validation measures them."""
    peers = nodes - 1
    changes = 2 * admissions_per_s  # admitted and evicted
    feed_calls = peers / poll_s     # made, and as many served
    feed_bytes = (feed_calls * (empty_page_bytes + request_bytes) +
                  peers * (changes * ID_BYTES + changes / chunks_per_record * record_bytes))
    return {
        "nodes": nodes,
        "directory_mib": peers * chunks_per_node * FILTER_BYTES_PER_CHUNK / 2**20,
        "feed_calls_per_s": feed_calls,
        "feed_mbit_per_s": feed_bytes * 8 / 1e6,
        "idle_reply_kbit_per_s": feed_calls * empty_page_bytes * 8 / 1e3,
        "bytes_per_remote_chunk": ID_BYTES + record_bytes / chunks_per_record,
        "broadcast_rpcs_per_miss": peers,
        # One holder named and asked, plus each other peer's false positive.
        "directed_rpcs_per_miss": 1 + peers * FALSE_POSITIVE,
        "directed_rpcs_per_unheld_miss": peers * FALSE_POSITIVE,
        # A node that joins is listed by every peer and lists every peer.
        "join_listing_gib": peers * chunks_per_node * ID_BYTES / 2**30,
        "forget_killed_s": poll_s / 4,  # its connection closes: out of Ready, then a feed tick
        "forget_partitioned_s": probe_interval_s + probe_timeout_s + poll_s / 4,
        "forget_etcd_s": etcd_ttl_s + 1 + poll_s / 4,
    }


class Fleet:
    """N real servers on loopback, each listing every other (`extra`: more flags)."""

    def __init__(self, tmp, nodes, mode, ctx, extra=()):
        key = write_key(tmp / "fleet.key", os.urandom(32))
        ports = free_tcp_ports(nodes)
        urls = [f"tcp://127.0.0.1:{p}" for p in ports]
        self.servers, self.workers = [], []
        for i, port in enumerate(ports):
            others = ",".join(u for j, u in enumerate(urls) if j != i)
            args = ["--drain-timeout-seconds", "0", "--http-port", "0",
                    "--p2p-advertise-url", f"127.0.0.1:{port}", "--p2p-auth-key-file", key,
                    "--p2p-peers", others, "--p2p-lookup", mode,
                    "--p2p-probe-interval", "1", "--p2p-probe-timeout", "0.5",
                    *(extra if "--l1-size-gb" in extra else ["--l1-size-gb", "0.05", *extra])]
            self.servers.append(mp_client.start_server(
                mp_client.server_binary(), f"ipc://{tmp / f'{mode}{i}.sock'}",
                tmp / f"{mode}{i}.log", args))
        for server in self.servers:
            client = Client(ctx, server.url)
            instance = new_instance_id()
            reg = register(client, instance)
            self.workers.append((client, instance, map_pool(reg["shm_name"], reg["pool_size"])))
        wait(lambda: all(stats(w[0])["p2p"]["peers"]["ready"] == nodes - 1 for w in self.workers),
             "every server sees every other ready")

    def p2p(self, i):
        return stats(self.workers[i][0])["p2p"]

    def close(self):
        for s in self.servers:
            if s.proc.poll() is None:
                s.stop(timeout=60)


def wait(predicate, what, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"never: {what}")
        time.sleep(0.05)


def rates(fleet, seconds):
    """Per node: the feed's calls and bytes per second over `seconds`."""
    n = len(fleet.servers)
    before = [fleet.p2p(i)["directory"] for i in range(n)]
    time.sleep(seconds)
    after = [fleet.p2p(i)["directory"] for i in range(n)]
    calls = [(a["polls"] - b["polls"]) / seconds for a, b in zip(after, before)]
    bits = [(a["feed_bytes"] - b["feed_bytes"]) * 8 / seconds for a, b in zip(after, before)]
    return calls, bits


def spread(values):
    return f"{statistics.median(values):.1f} ({min(values):.1f}..{max(values):.1f})"


def run(args, mode, ctx, tmp):
    fleet = Fleet(tmp, args.nodes, mode, ctx)
    out = {}
    try:
        n = args.nodes
        rng = np.random.default_rng(43)
        chunk = chunk_size(fleet.workers[0][0])
        idle_calls, idle_bits = rates(fleet, args.seconds)
        out["idle_calls"], out["idle_bits"] = idle_calls, idle_bits
        # Every node stores its prompts; what the feed carries meanwhile.
        prompts = [[random_tokens(rng, args.chunks * chunk) for _ in range(args.prompts)]
                   for _ in range(n)]
        before = [fleet.p2p(i)["directory"] for i in range(n)]
        started = time.monotonic()
        for i, (client, instance, pool) in enumerate(fleet.workers):
            for k, tokens in enumerate(prompts[i]):
                store_prompt(client, pool, instance, tokens, args.chunks, f"s{i}-{k}", rng)
        if mode == "directed":
            wait(lambda: all(fleet.p2p(i)["directory"]["chunks"] >=
                             (n - 1) * args.prompts * args.chunks for i in range(n)),
                 "every directory holds every peer's chunks")
        took = time.monotonic() - started
        after = [fleet.p2p(i)["directory"] for i in range(n)]
        # What the store phase added over the feed's idle traffic, per chunk
        # stored on a peer.
        remote = (n - 1) * args.prompts * args.chunks
        out["bytes_per_remote_chunk"] = [
            (a["feed_bytes"] - b["feed_bytes"] - idle / 8 * took) / remote
            for a, b, idle in zip(after, before, idle_bits)]
        out["store_seconds"] = took
        out["directory_bytes"] = [fleet.p2p(i)["directory"]["memory_bytes"] for i in range(n)]
        # Lookups: node i asks for node (i+1)'s first prompt (one holder),
        # and for a prompt nobody holds.
        held, nowhere = [], []
        for i, (client, _, _) in enumerate(fleet.workers):
            owner = (i + 1) % n
            b = fleet.p2p(i)["lookups"]
            assert lookup_l2(client, prompts[owner][0], f"hit{i}", timeout_s=60) == args.chunks
            m = fleet.p2p(i)["lookups"]
            assert lookup_l2(client, random_tokens(rng, args.chunks * chunk), f"miss{i}",
                             timeout_s=60) == 0
            e = fleet.p2p(i)["lookups"]
            held.append(m["rpcs"] - b["rpcs"])
            nowhere.append(e["rpcs"] - m["rpcs"])
        out["rpcs_held"], out["rpcs_nowhere"] = held, nowhere
        # A node killed: how long until every other directory forgot it.
        if mode == "directed":
            killed_at = time.monotonic()
            fleet.servers[-1].kill()
            wait(lambda: all(fleet.p2p(i)["directory"]["peers"] == n - 2 for i in range(n - 1)),
                 "every directory forgot the killed node")
            out["forget_s"] = time.monotonic() - killed_at
    finally:
        fleet.close()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()
    ctx = zmq.Context()
    with tempfile.TemporaryDirectory() as d:
        directed = run(args, "directed", ctx, Path(d))
    with tempfile.TemporaryDirectory() as d:
        broadcast = run(args, "broadcast", ctx, Path(d))
    n = args.nodes
    predicted = model(n, chunks_per_node=args.prompts * args.chunks, admissions_per_s=0)
    print(f"# {n} real servers on loopback (median (min..max) over the nodes)")
    print(f"feed calls/s per node at rest: measured {spread(directed['idle_calls'])}, "
          f"model {predicted['feed_calls_per_s']:.1f}")
    print(f"feed reply kbit/s per node at rest: measured "
          f"{spread([b / 1e3 for b in directed['idle_bits']])}, "
          f"model {predicted['idle_reply_kbit_per_s']:.1f}")
    print(f"feed reply bytes per chunk stored on a peer (over the idle traffic): measured "
          f"{spread(directed['bytes_per_remote_chunk'])}, model {predicted['bytes_per_remote_chunk']}")
    print(f"directory bytes per node: {spread(directed['directory_bytes'])} "
          f"(filters of {n - 1} peers at the 16,384-chunk minimum each: "
          f"{(n - 1) * 16384 * FILTER_BYTES_PER_CHUNK:.0f})")
    print(f"lookup RPCs for a prompt one peer holds: directed {spread(directed['rpcs_held'])}, "
          f"broadcast {spread(broadcast['rpcs_held'])}; model {predicted['directed_rpcs_per_miss']:.3f} "
          f"and {predicted['broadcast_rpcs_per_miss']}")
    print(f"lookup RPCs for a prompt nobody holds: directed {spread(directed['rpcs_nowhere'])}, "
          f"broadcast {spread(broadcast['rpcs_nowhere'])}")
    print(f"a killed node left every directory in {directed['forget_s']:.2f} s "
          f"(model: its connection closes, then a feed tick: {predicted['forget_killed_s']:.3f} s "
          f"+ the peer RPC's monitor)")
    print("\n# the model at fleet scale (1 M chunks per node, 10,000 admissions/s, poll 0.1 s)")
    keys = ["nodes", "directory_mib", "feed_calls_per_s", "feed_mbit_per_s",
            "broadcast_rpcs_per_miss", "directed_rpcs_per_miss", "directed_rpcs_per_unheld_miss",
            "join_listing_gib", "forget_killed_s", "forget_partitioned_s", "forget_etcd_s"]
    print(" | ".join(keys))
    for nodes in (10, 100, 1000):
        m = model(nodes)
        print(" | ".join(f"{m[k]:.3g}" if isinstance(m[k], float) else str(m[k]) for k in keys))


if __name__ == "__main__":
    main()
