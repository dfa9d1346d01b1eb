#!/usr/bin/env python3
"""The GPU benchmark of the CUDA-IPC path (needs an NVIDIA GPU and a server
built with the CUDA toolkit). One command from the repository root:

    /usr/bin/python3 tools/gpu_bench.py --json gpu_bench.json

(the GPU kit, tools/gpu_kit/, runs it so on the GPU machine). It starts
lmcache-server --gpu-backend cuda and, per profile, registers a
PyTorch-free worker (tests/python/cuda_worker.py) whose paged cache lives in
cudaMalloc'd memory, then per round, interleaved:
  store     a fresh prompt of --chunks chunks: from the store request until
            the server's interprocess event completes (gather + D2H into L1);
  retrieve  the same prompt after a lookup (H2D + scatter), until its event;
  memcpy    cudaMemcpyAsync of the same bytes device -> pinned host and back
            (each synchronised), the copy engine's own rate.
Profiles (the KV cache one GPU of each holds; bfloat16, blocks of 16):
  llama3-8b       32 layers, 8 KV heads of 128, split K/V NHD (32 MiB a chunk)
  llama3-70b-tp8  80 layers, 1 KV head of 128 (a tensor-parallel rank of 8)
  mla             61 layers, a 576-wide latent (DeepSeek-V3), format 3
It reports GB/s medians with min and max, and per profile
gpu_store_vs_memcpy, gpu_retrieve_vs_memcpy (the median of each round's
ratio; target >= 0.9). Without a visible device it prints "SKIPPED: ..."
and exits 77.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The workers live in tests/python; in the GPU kit they lie beside this file.
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, HERE)

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


PROFILES = {
    "llama3-8b": dict(layers=32, heads=8, head_size=128, mla=False),
    "llama3-70b-tp8": dict(layers=80, heads=1, head_size=128, mla=False),
    "mla": dict(layers=61, heads=1, head_size=576, mla=True),
}


def bench_profile(cuda, server, name, geometry, args):
    block = 16
    blocks = args.chunks * args.chunk_size // block
    worker = CudaWorker(cuda, blocks=blocks, block_size=block, **geometry)
    object_bytes = geometry["layers"] * args.chunk_size * worker.token_bytes
    total = args.chunks * object_bytes
    ctx = zmq.Context()
    client, scheduler = Client(ctx, server.url, 120), Client(ctx, server.url, 120)
    model = f"gpu-bench/{name}"
    rng = np.random.default_rng(1)
    pinned = None
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
            key = make_key(tokens, 0, len(tokens), f"{name}{r}", model=model)

            def store():
                reply = client.request("store", key, worker.instance_id, [ids], worker.engine_event())
                assert reply.error is None and reply.value[1], reply
                cuda.wait_ipc_event(reply.value[0])

            def retrieve():
                reply = client.request("retrieve", key, worker.instance_id, [ids], worker.engine_event(), 0)
                assert reply.error is None and reply.value[1], reply
                cuda.wait_ipc_event(reply.value[0])

            def memcpy(dst, src, kind):
                cuda.copy_async(dst, src, total, kind)
                cuda.stream_synchronize()

            t_store = timed(store)
            lookup_key = make_key(tokens, 0, len(tokens), f"{name}{r}", worker_id=None, model=model)
            assert scheduler.call(OP_LOOKUP, lookup_key, 1) is None
            assert scheduler.call(OP_QUERY_PREFETCH_STATUS, f"{name}{r}") == args.chunks
            t_retrieve = timed(retrieve)
            assert scheduler.call(OP_END_SESSION, f"{name}{r}") is None
            t_d2h = timed(lambda: memcpy(pinned, worker.base, D2H))
            t_h2d = timed(lambda: memcpy(worker.base, pinned, H2D))
            scheduler.call("clear")
            if r > 0:
                rows.append({"store": total / t_store / 1e9, "retrieve": total / t_retrieve / 1e9,
                             "d2h": total / t_d2h / 1e9, "h2d": total / t_h2d / 1e9})
        return {
            "geometry": geometry, "rounds": args.rounds, "bytes_per_round": total,
            "object_bytes": object_bytes,
            "store_gbps": summary([r["store"] for r in rows]),
            "retrieve_gbps": summary([r["retrieve"] for r in rows]),
            "memcpy_d2h_gbps": summary([r["d2h"] for r in rows]),
            "memcpy_h2d_gbps": summary([r["h2d"] for r in rows]),
            "gpu_store_vs_memcpy": summary([r["store"] / r["d2h"] for r in rows]),
            "gpu_retrieve_vs_memcpy": summary([r["retrieve"] / r["h2d"] for r in rows]),
        }
    finally:
        client.close()
        scheduler.close()
        ctx.term()
        if pinned is not None:
            cuda.lib.cudaFreeHost(ctypes.c_void_p(pinned))
        worker.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.path.join(ROOT, "build", "src", "lmcache-server"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--chunk-size", type=int, default=256)
    ap.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated, of: " + ", ".join(PROFILES))
    ap.add_argument("--json")
    args = ap.parse_args()
    profiles = [p for p in args.profiles.split(",") if p]
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown:
        sys.exit(f"unknown profiles {unknown}: choose from {list(PROFILES)}")

    try:
        cuda = Cuda()
    except RuntimeError as e:
        print(f"SKIPPED: {e}")
        sys.exit(77)
    if cuda.device_count() == 0:
        print("SKIPPED: no CUDA device visible: the GPU benchmark needs one")
        sys.exit(77)
    largest = max(PROFILES[p]["layers"] * args.chunk_size * CudaWorker.token_bytes_of(**PROFILES[p])
                  for p in profiles) * args.chunks
    l1_gb = max(1.0, 2.5 * largest / 2**30)
    tmp = tempfile.mkdtemp(prefix="lmc-gpu-bench-")
    server = start_server(args.server, f"ipc://{tmp}/lmc.sock", os.path.join(tmp, "server.log"),
                          ["--l1-size-gb", f"{l1_gb:.2f}", "--chunk-size", str(args.chunk_size),
                           "--port", str(free_tcp_port()), "--http-port", "0",
                           "--drain-timeout-seconds", "0", "--gpu-backend", "cuda"])
    result = {"gpu": gpu_name(cuda), "profiles": {}}
    try:
        for name in profiles:
            result["profiles"][name] = bench_profile(cuda, server, name, PROFILES[name], args)
            print(name, json.dumps(result["profiles"][name]), flush=True)
    finally:
        server.stop()
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
