#!/usr/bin/env python3
"""The GPU benchmark of the CUDA-IPC path (needs an NVIDIA GPU and a server
built with the CUDA toolkit). One command from the repository root:

    /usr/bin/python3 tools/gpu_bench.py --json gpu_bench.json

It starts lmcache-server --gpu-backend cuda, registers a PyTorch-free worker
(tests/python/cuda_worker.py) whose NHD paged cache lives in cudaMalloc'd
memory, and per round, interleaved:
  store     a fresh prompt of --chunks chunks: from the store request until
            the server's interprocess event completes (gather + D2H into L1);
  retrieve  the same prompt after a lookup (H2D + scatter), until its event;
  memcpy    cudaMemcpy of the same bytes device -> pinned host and back.
It reports GB/s medians with their spread and gpu_store_vs_memcpy,
gpu_retrieve_vs_memcpy (the median of each round's ratio; target >= 0.9).
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from cuda_worker import D2H, H2D, Cuda, CudaWorker  # noqa: E402
from mp_client import (OP_END_SESSION, OP_LOOKUP, OP_QUERY_PREFETCH_STATUS, Client,  # noqa: E402
                       free_tcp_port, make_key, new_instance_id, random_tokens, start_server)


def gpu_name(cuda):
    prop = ctypes.create_string_buffer(8192)
    fn = getattr(cuda.lib, "cudaGetDeviceProperties_v2", None) or cuda.lib.cudaGetDeviceProperties
    fn(prop, ctypes.c_int(0))
    return prop.raw[:256].split(b"\0")[0].decode()


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.path.join(ROOT, "build", "src", "lmcache-server"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--chunk-size", type=int, default=256)
    ap.add_argument("--json")
    args = ap.parse_args()

    cuda = Cuda()
    if cuda.device_count() == 0:
        sys.exit("no CUDA device visible: the GPU benchmark needs one")
    block = 16
    blocks = args.chunks * args.chunk_size // block
    worker = CudaWorker(cuda, layers=args.layers, blocks=blocks, block_size=block)
    object_bytes = 2 * args.layers * args.chunk_size * worker.shape[3] * worker.shape[4] * 2
    total = args.chunks * object_bytes
    l1_gb = max(1.0, 2.5 * total / 2**30)
    tmp = tempfile.mkdtemp(prefix="lmc-gpu-bench-")
    server = start_server(args.server, f"ipc://{tmp}/lmc.sock", os.path.join(tmp, "server.log"),
                          ["--l1-size-gb", f"{l1_gb:.2f}", "--chunk-size", str(args.chunk_size),
                           "--port", str(free_tcp_port()), "--http-port", "0",
                           "--drain-timeout-seconds", "0", "--gpu-backend", "cuda"])
    ctx = zmq.Context()
    client, scheduler = Client(ctx, server.url, 120), Client(ctx, server.url, 120)
    model = "gpu-bench/model"
    rng = np.random.default_rng(1)
    try:
        reply = worker.register(client, new_instance_id(), model)
        assert reply.error is None, (reply, server.log())
        for layer in range(worker.layers):
            worker.write_layer(layer, rng.integers(0, 2**16, size=worker.shape, dtype=np.uint16))
        pinned = cuda.host_alloc(total)
        ids = [int(i) for i in range(blocks)]
        rows = []
        for r in range(args.rounds + 1):  # round 0 warms up (first registration pins L1)
            tokens = random_tokens(rng, args.chunks * args.chunk_size)
            key = make_key(tokens, 0, len(tokens), f"r{r}", model=model)

            def store():
                reply = client.request("store", key, worker.instance_id, [ids], worker.engine_event())
                assert reply.error is None and reply.value[1], reply
                cuda.wait_ipc_event(reply.value[0])

            def retrieve():
                reply = client.request("retrieve", key, worker.instance_id, [ids], worker.engine_event(), 0)
                assert reply.error is None and reply.value[1], reply
                cuda.wait_ipc_event(reply.value[0])

            t_store = timed(store)
            lookup_key = make_key(tokens, 0, len(tokens), f"r{r}", worker_id=None, model=model)
            assert scheduler.call(OP_LOOKUP, lookup_key, 1) is None
            assert scheduler.call(OP_QUERY_PREFETCH_STATUS, f"r{r}") == args.chunks
            t_retrieve = timed(retrieve)
            assert scheduler.call(OP_END_SESSION, f"r{r}") is None
            t_d2h = timed(lambda: cuda.copy(pinned, worker.base, total, D2H))
            t_h2d = timed(lambda: cuda.copy(worker.base, pinned, total, H2D))
            scheduler.call("clear")
            if r > 0:
                rows.append({"store": total / t_store / 1e9, "retrieve": total / t_retrieve / 1e9,
                             "d2h": total / t_d2h / 1e9, "h2d": total / t_h2d / 1e9})
        result = {
            "gpu": gpu_name(cuda), "rounds": args.rounds, "bytes_per_round": total,
            "object_bytes": object_bytes,
            "store_gbps": summary([r["store"] for r in rows]),
            "retrieve_gbps": summary([r["retrieve"] for r in rows]),
            "memcpy_d2h_gbps": summary([r["d2h"] for r in rows]),
            "memcpy_h2d_gbps": summary([r["h2d"] for r in rows]),
            "gpu_store_vs_memcpy": summary([r["store"] / r["d2h"] for r in rows]),
            "gpu_retrieve_vs_memcpy": summary([r["retrieve"] / r["h2d"] for r in rows]),
        }
        print(json.dumps(result, indent=1))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    finally:
        client.close()
        scheduler.close()
        ctx.term()
        server.stop()
        worker.close()


if __name__ == "__main__":
    main()
