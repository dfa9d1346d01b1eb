#!/usr/bin/env python3
"""How fast a server loads a prompt from its peer, against what UCX itself
moves over the same transport on the same machine in the same run.

Two real servers, A and B, each listing the other (--p2p-peers), on loopback
or each in a network namespace of its own (--netns, as root: a veth pair,
UCX_TLS=tcp). A worker of A stores a prompt of --chunks chunks; then, per
round, B's L1 is cleared and a lookup on B is timed from the lookup to the
prefetch's answer (query_prefetch_status stops answering nil), which is
when every chunk has landed in B's L1 from A over UCX. Interleaved with
each round, ucx_perftest moves messages of one chunk's size between two
processes over the same transport (UCX_TLS as the servers get it, UCX's own
settings otherwise), as a one-way stream of active messages (ucp_am_bw, the
fastest UCX moves them) and as one-sided gets (ucp_get, the issue's
reference): the ceiling this machine's UCX gives; and the same prompt crosses
through Redis, the other cross-node path: a redis-server on A's side, a
server C beside A that stored the prompt there (write-behind, resp L2
adapter), and a server D beside B whose lookup loads it from Redis (B and D
in the same namespace, C and A in the other). Each round also reads A's and
redis-server's CPU time (/proc/PID/stat) around the load: what serving one
GB costs the owner. Prints medians with their spread (min..max) and the
paired ratios; docs/performance.md records the figures.

  tools/p2p_bench.py [--netns] [--chunks 16] [--rounds 7] [--layers 8 --hidden 1024] [--no-redis]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))

import numpy as np  # noqa: E402
import zmq  # noqa: E402

import mp_client  # noqa: E402
from mp_client import (OP_CLEAR, Client, chunk_size, lookup_l2, map_pool,  # noqa: E402
                       new_instance_id, random_tokens, register, retrieve, stats, store_prompt,
                       wait_until_directory_holds)
from test_p2p_owner import write_key  # noqa: E402
from test_p2p_sharing import Namespaces  # noqa: E402


def start_with(tmp, name, prefix, env, pool_gb, extra):
    args = ["--l1-size-gb", str(pool_gb), "--drain-timeout-seconds", "0", "--http-port", "0",
            *extra]
    return mp_client.start_server(mp_client.server_binary(), f"ipc://{tmp / (name + '.sock')}",
                                  tmp / f"{name}.log", args, prefix, env)


def start(tmp, name, key_file, host, port, peer, prefix, env, pool_gb):
    return start_with(tmp, name, prefix, env, pool_gb,
                      ["--p2p-advertise-url", f"{host}:{port}", "--p2p-auth-key-file", key_file,
                       "--p2p-peers", peer])


def start_resp(tmp, name, redis_url, prefix, env, pool_gb):
    """A server without P2P whose L2 is the Redis at `redis_url`."""
    return start_with(tmp, name, prefix, env, pool_gb,
                      ["--l2-adapter", f'{{"type":"resp","url":"{redis_url}"}}'])


def start_redis(prefix, host, port):
    proc = subprocess.Popen([*prefix, "redis-server", "--bind", host, "--port", str(port),
                             "--save", "", "--appendonly", "no", "--protected-mode", "no",
                             "--maxmemory", "4gb"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        ping = subprocess.run([*prefix, "redis-cli", "-h", host, "-p", str(port), "ping"],
                              capture_output=True, text=True, timeout=30)
        if ping.stdout.strip() == "PONG":
            return proc
        time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not answer")


def cpu_seconds(pid):
    """User plus system CPU time of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_load(worker, tokens, chunks, request_id, source_pid, total):
    """Clears `worker`'s server's L1, then loads the prompt from L2 into it and
    retrieves it: the MB/s from the lookup to its answer, and the CPU seconds
    per GB process `source_pid` (who served the bytes) spent meanwhile."""
    client, instance, pool = worker
    assert client.call(OP_CLEAR, True) is None
    cpu_before = cpu_seconds(source_pid)
    start_s = time.perf_counter()
    hits = lookup_l2(client, tokens, request_id, timeout_s=120, poll_s=0.0005)
    elapsed = time.perf_counter() - start_s
    cpu_per_gb = (cpu_seconds(source_pid) - cpu_before) / (total / 1e9)
    if hits != chunks:
        sys.exit(f"{request_id}: found {hits} of {chunks} chunks")
    retrieve(client, pool, instance, tokens, chunks, request_id)
    return total / elapsed / 1e6, cpu_per_gb


def worker_of(ctx, server):
    client = Client(ctx, server.url, reply_timeout_s=120)
    instance = new_instance_id()
    reg = register(client, instance)
    return client, instance, map_pool(reg["shm_name"], reg["pool_size"])


def perftest_mb_s(test, size, prefix_server, prefix_client, server_host, env, port=13337):
    """ucx_perftest `test` (ucp_am_bw, ucp_get) of `size`-byte messages, UCX's
    own settings: the overall MB/s. With
    endpoints that handle a peer's failure (-e), as the servers' do: UCX then
    picks the same transports for both (on one host TCP over loopback, not
    shared memory, whose transports do not handle a peer's failure)."""
    server = subprocess.Popen([*prefix_server, "ucx_perftest", "-p", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # the server listens within a moment
            out = subprocess.run([*prefix_client, "ucx_perftest", server_host, "-p", str(port),
                                  "-t", test, "-s", str(size), "-n", "64", "-e"], env=env,
                                 capture_output=True, text=True, timeout=120)
            final = re.search(r"Final:\s+(.*)", out.stdout)
            if final:
                return float(final.group(1).split()[5])
            time.sleep(0.1)
        raise RuntimeError(f"ucx_perftest gave no result: {out.stdout}{out.stderr}")
    finally:
        server.wait(timeout=30)


def spread(values):
    return f"{statistics.median(values):.0f} ({min(values):.0f}..{max(values):.0f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--netns", action="store_true", help="each server in its own network namespace")
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--verbose", action="store_true", help="B's adapter and prefetch figures")
    parser.add_argument("--no-redis", action="store_true", help="skip the path through Redis")
    args = parser.parse_args()
    if shutil.which("ucx_perftest") is None:
        sys.exit("ucx_perftest not found: apt-get install ucx-utils")
    mp_client.NUM_LAYERS, mp_client.HIDDEN_DIM = args.layers, args.hidden

    tmp = Path(tempfile.mkdtemp(prefix="p2p_bench_"))
    key_file = write_key(tmp / "fleet.key", os.urandom(32))
    namespaces = Namespaces() if args.netns else None
    if namespaces:
        hosts, ports = namespaces.hosts, [5556, 5556]
        prefixes = [namespaces.prefix(0), namespaces.prefix(1)]
        env = dict(os.environ, UCX_TLS="tcp")
    else:
        hosts, ports = ["127.0.0.1"] * 2, mp_client.free_tcp_ports(2)
        prefixes, env = [(), ()], None
    use_redis = not args.no_redis and shutil.which("redis-server") is not None
    ctx = zmq.Context()
    servers = []
    redis = None
    try:
        servers.append(start(tmp, "a", key_file, hosts[0], ports[0], f"tcp://{hosts[1]}:{ports[1]}",
                             prefixes[0], env, 4))
        servers.append(start(tmp, "b", key_file, hosts[1], ports[1], f"tcp://{hosts[0]}:{ports[0]}",
                             prefixes[1], env, 4))
        (a, a_instance, a_pool), (b, b_instance, b_pool) = (worker_of(ctx, s) for s in servers)
        deadline = time.monotonic() + 60
        while stats(b)["p2p"]["peers"]["ready"] != 1:
            if time.monotonic() > deadline:
                sys.exit("B never saw A ready")
            time.sleep(0.05)
        # Each pool is pre-faulted by a thread of its server after it is
        # ready: rounds that ran meanwhile measured that thread's page
        # zeroing (perf: clear_page_erms under madvise, half of B's CPU).
        for server in servers:
            server.wait_for_log("pre-faulted", timeout_s=300)
        rng = np.random.default_rng(1)
        chunk = chunk_size(a)
        tokens = random_tokens(rng, args.chunks * chunk)
        store_prompt(a, a_pool, a_instance, tokens, args.chunks, "bench-store", rng)
        # B's directory names A for the prompt once it read A's chunk log
        # (directed lookups, the default); the timed rounds start after that.
        wait_until_directory_holds(b, args.chunks)
        chunk_bytes = 2 * args.layers * chunk * args.hidden * mp_client.ITEM_SIZE
        total = chunk_bytes * args.chunks
        if use_redis:
            redis_port = 6390 if namespaces else mp_client.free_tcp_ports(1)[0]
            redis = start_redis(prefixes[0], hosts[0], redis_port)
            redis_url = f"redis://{hosts[0]}:{redis_port}"
            servers.append(start_resp(tmp, "c", redis_url, prefixes[0], env, 1))
            servers.append(start_resp(tmp, "d", redis_url, prefixes[1], env, 1))
            (c, c_instance, c_pool), (d, d_instance, d_pool) = (worker_of(ctx, s)
                                                                for s in servers[2:])
            for server in servers[2:]:
                server.wait_for_log("pre-faulted", timeout_s=300)
            store_prompt(c, c_pool, c_instance, tokens, args.chunks, "bench-store", rng)
            deadline = time.monotonic() + 120
            while stats(c)["l2"]["adapters"][0]["stored_objects"] < args.chunks:
                if time.monotonic() > deadline:
                    sys.exit("C never wrote the prompt to Redis")
                time.sleep(0.05)
        p2p, ucx, gets, via_redis, owner_cpu, redis_cpu = [], [], [], [], [], []
        for r in range(args.rounds):
            rate, cpu = timed_load((b, b_instance, b_pool), tokens, args.chunks, f"bench-{r}",
                                   servers[0].proc.pid, total)
            p2p.append(rate)
            owner_cpu.append(cpu)
            ucx.append(perftest_mb_s("ucp_am_bw", chunk_bytes, prefixes[0], prefixes[1], hosts[0],
                                     env))
            gets.append(perftest_mb_s("ucp_get", chunk_bytes, prefixes[0], prefixes[1], hosts[0],
                                      env))
            if use_redis:
                rate, cpu = timed_load((d, d_instance, d_pool), tokens, args.chunks, f"redis-{r}",
                                       redis.pid, total)
                via_redis.append(rate)
                redis_cpu.append(cpu)
        where = "two network namespaces, UCX_TLS=tcp" if namespaces else "loopback, UCX's choice"
        print(f"{where}: {args.chunks} chunks of {chunk_bytes / 2**20:.1f} MiB, {args.rounds} rounds")
        print(f"  P2P load into B's L1, MB/s:        {spread(p2p)}")
        print(f"  ucx_perftest ucp_am_bw, MB/s:      {spread(ucx)}")
        print(f"  ucx_perftest ucp_get, MB/s:        {spread(gets)}")
        if args.verbose:
            adapter = stats(b)["l2"]["adapters"][0]
            for field in ("lookup_latency", "load_latency"):
                print(f"  B's p2p adapter {field}: {adapter[field]}")
            print(f"  B's prefetch: {stats(b)['l2']['prefetch']}")
            if use_redis:
                adapter = stats(d)["l2"]["adapters"][0]
                for field in ("lookup_latency", "load_latency"):
                    print(f"  D's resp adapter {field}: {adapter[field]}")
                print(f"  D's prefetch latency: {stats(d)['l2']['prefetch']['latency']}")
        for name, raw in (("ucp_am_bw", ucx), ("ucp_get", gets)):
            ratios = [p / u for p, u in zip(p2p, raw)]
            print(f"  ratio P2P / {name} (paired):{' ' * (13 - len(name))}"
                  f"{statistics.median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f})")
        print(f"  owner (A) CPU seconds per GB served: {statistics.median(owner_cpu):.2f} "
              f"({min(owner_cpu):.2f}..{max(owner_cpu):.2f})")
        if use_redis:
            print(f"  through Redis into D's L1, MB/s:   {spread(via_redis)}")
            by_redis = [p / v for p, v in zip(p2p, via_redis)]
            print(f"  ratio P2P / Redis (paired):        {statistics.median(by_redis):.2f} "
                  f"({min(by_redis):.2f}..{max(by_redis):.2f})")
            print(f"  redis-server CPU seconds per GB:   {statistics.median(redis_cpu):.2f} "
                  f"({min(redis_cpu):.2f}..{max(redis_cpu):.2f})")
    finally:
        for server in servers:
            server.stop(timeout=60)
        if redis is not None:
            redis.terminate()
            redis.wait(timeout=30)
        if namespaces:
            namespaces.close()
        ctx.destroy(linger=0)


if __name__ == "__main__":
    main()
