#!/usr/bin/env python3
"""The load-or-recompute policy (issue 63, section 2): how long a lookup takes
to answer, and what it answers, with the policy on (--prefill-tokens-per-second
*=RATE) and off, on the same tier, side by side in one run.

Two real servers, each with one fs tier behind --l2-store-policy skip_l1 (so
every lookup must load from the tier), the tier wrapped in the fault adapter
with --delay-ms per call (0: a plain fs tier). Each repetition stores a fresh
prompt of --chunks chunks in both servers, waits until both hold it in the
tier only, then looks it up on one server and then on the other (the order
alternates). The first repetition warms the tier's cost meter up and is not
counted. Printed per server: the median, min and max time from lookup to its
answer, the hits, the tier's measured cost per object, and what recomputing
the declined tokens would take at RATE; "expected TTFT part" is answer time
plus the recompute of what was not hit.

  tools/load_policy_bench.py [--delay-ms 300] [--rate 10000] [--chunks 4] [--reps 7]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))

import numpy as np  # noqa: E402
import zmq  # noqa: E402

from mp_client import (Client, chunk_size, free_tcp_port, lookup_l2, map_pool,  # noqa: E402
                       new_instance_id, random_tokens, register, server_binary, start_server,
                       stats, store_prompt)


def start(ctx, tmp, name, delay_ms, extra):
    inner = '{"type":"fs","base_path":"%s"}' % (tmp / name)
    adapter = inner if delay_ms == 0 else (
        '{"type":"fault_inject","delay_ms":%d,"inner":%s}' % (delay_ms, inner))
    url = f"tcp://127.0.0.1:{free_tcp_port()}"
    server = start_server(server_binary(), url, tmp / f"{name}.log",
                          ["--l1-size-gb", "0.25", "--l2-store-policy", "skip_l1",
                           "--l2-adapter", adapter, *extra])
    client = Client(ctx, url)
    instance_id = new_instance_id()
    reg = register(client, instance_id)
    return server, client, instance_id, map_pool(reg["shm_name"], reg["pool_size"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay-ms", type=int, default=300)
    parser.add_argument("--rate", type=float, default=10000)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    ctx = zmq.Context()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        servers = {"on": start(ctx, tmp, "on", args.delay_ms,
                               ["--prefill-tokens-per-second", f"*={args.rate}"]),
                   "off": start(ctx, tmp, "off", args.delay_ms, [])}
        try:
            chunk = chunk_size(servers["on"][1])
            rng = np.random.default_rng(63)
            times = {name: [] for name in servers}
            hits = {name: [] for name in servers}
            for rep in range(args.reps + 1):
                tokens = random_tokens(rng, args.chunks * chunk)
                for _, client, instance_id, pool in servers.values():
                    store_prompt(client, pool, instance_id, tokens, args.chunks, f"s{rep}", rng)
                for _, client, _, _ in servers.values():
                    while (stats(client)["l2"]["store"]["deleted_from_l1"]
                           < (rep + 1) * args.chunks):
                        time.sleep(0.01)
                order = list(servers) if rep % 2 == 0 else list(reversed(servers))
                for name in order:
                    client = servers[name][1]
                    start_time = time.monotonic()
                    hit = lookup_l2(client, tokens, f"l{rep}", timeout_s=120, poll_s=0.002)
                    took = time.monotonic() - start_time
                    if rep > 0:
                        times[name].append(took * 1000)
                        hits[name].append(hit)
            for name, (_, client, _, _) in servers.items():
                tier = stats(client)["l2"]["adapters"][0]
                t = times[name]
                hit = statistics.median(hits[name])
                recompute_ms = (args.chunks - hit) * chunk / args.rate * 1000
                print(f"delay {args.delay_ms} ms/call, policy {name}: lookup answered in median "
                      f"{statistics.median(t):.1f} ms (min {min(t):.1f}, max {max(t):.1f}), hits "
                      f"{sorted(set(hits[name]))} of {args.chunks}, tier cost "
                      f"{tier['load_seconds_per_object'] * 1000:.2f} ms/object, declined "
                      f"{tier['declined_slower_than_recompute']}; expected TTFT part "
                      f"{statistics.median(t) + recompute_ms:.1f} ms "
                      f"(+{recompute_ms:.1f} ms recompute at {args.rate:g} tokens/s)")
        finally:
            for server, client, _, _ in servers.values():
                client.close()
                server.stop()
    ctx.destroy(linger=0)


if __name__ == "__main__":
    main()
