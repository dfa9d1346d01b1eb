#!/usr/bin/env python3
"""Flood probe: one client pipelines large lookups without reading its replies
while a polite client times small lookups; reports the polite client's
latencies, the server's memory growth and how the flood was answered.

    tools/flood_probe.py build/src/lmcache-server [--seconds 10] [--flood 3000]

Uses Debian's python3-zmq and python3-msgpack; starts its own server on a
private ipc socket. A measurement, not a test: the figures go into notes and
docs/performance.md.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import msgpack
import zmq


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def key(tokens, request_id, worker=None):
    return msgpack.packb({"model_name": "flood", "world_size": 1, "worker_id": worker,
                          "token_ids": tokens, "start": 0, "end": len(tokens) // 256 * 256,
                          "request_id": request_id, "cache_salt": "", "num_kv_readers": 1})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("server")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--flood", type=int, default=3000)
    args = parser.parse_args()
    sock = os.path.join(tempfile.gettempdir(), f"flood_probe_{os.getpid()}.sock")
    url = "ipc://" + sock
    server = subprocess.Popen([args.server, "--l1-size-gb", "1", "--url", url, "--log-level", "error"])
    ctx = zmq.Context()
    try:
        polite = ctx.socket(zmq.DEALER)
        polite.connect(url)
        uid = 0

        def call(sock_, op, *payloads, timeout=30000):
            nonlocal uid
            uid += 1
            sock_.send_multipart([msgpack.packb(uid), msgpack.packb(op)] + list(payloads))
            if not sock_.poll(timeout):
                return None
            return sock_.recv_multipart()

        for _ in range(100):
            if call(polite, "ping", msgpack.packb(None), timeout=500):
                break
        reg = {"instance_id": 1, "model_name": "flood", "world_size": 1, "block_size": 16,
               "num_layers": 1, "hidden_dim_size": 8, "dtype_str": "bfloat16", "use_mla": False}
        call(polite, 14, msgpack.packb(reg))
        base_rss = rss_mib(server.pid)
        # The flooder is a process of its own, sending while the polite client probes.
        reader, writer = os.pipe()
        flood_pid = os.fork()
        if flood_pid == 0:
            fctx = zmq.Context()
            flooder = fctx.socket(zmq.DEALER)
            flooder.setsockopt(zmq.SNDHWM, 0)
            flooder.connect(url)
            # A distinct request id per lookup (so every one is hashed), patched
            # into one packed key: packing 131072 tokens per message would make
            # this client, not the server, the bottleneck.
            big = bytearray(key(list(range(131072)), "flood-00000000"))
            at = bytes(big).index(b"flood-00000000")
            for i in range(args.flood):
                big[at:at + 14] = b"flood-%08d" % i
                flooder.send_multipart([msgpack.packb(i), msgpack.packb(8), bytes(big),
                                        msgpack.packb(1)])
            os.read(reader, 1)  # wait until the probe is done, then count the replies
            refused = answered = 0
            while flooder.poll(3000):
                frames = flooder.recv_multipart()
                answered += 1
                if len(frames) > 3 and msgpack.unpackb(frames[3]).get("code") == 402:
                    refused += 1
            print(f"flood: {args.flood} sent, {answered} answered, {refused} refused with 402")
            os._exit(0)
        time.sleep(0.5)  # let the flood start
        latencies = []
        peak_rss = base_rss
        deadline = time.time() + args.seconds
        n = 0
        while time.time() < deadline:
            n += 1
            t0 = time.time()
            r1 = call(polite, 8, key(list(range(512)), f"p{n}"), msgpack.packb(1), timeout=60000)
            r2 = call(polite, 9, msgpack.packb(f"p{n}"), timeout=60000)
            latencies.append((time.time() - t0) * 1000 if r1 and r2 else float("inf"))
            peak_rss = max(peak_rss, rss_mib(server.pid))
            time.sleep(0.1)
        print(f"polite lookups: {len(latencies)}, latency ms median {statistics.median(latencies):.1f} "
              f"max {max(latencies):.1f}; server RSS {base_rss:.0f} MiB -> peak {peak_rss:.0f} MiB",
              flush=True)
        os.write(writer, b"x")
        os.waitpid(flood_pid, 0)
    finally:
        server.terminate()
        server.wait()
        ctx.destroy(0)


if __name__ == "__main__":
    sys.exit(main())
