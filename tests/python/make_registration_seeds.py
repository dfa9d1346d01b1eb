#!/usr/bin/env python3
"""Writes seeds for fuzz/kv_registration_fuzzer: register_kv_cache's seven
frames as gpu_worker.py's emulated vLLM workers send them (every layout, two
KV groups with a sliding window, a cross-layer tensor, the msgpack map form),
then a block_ids frame, in fuzz/fuzz_input.h's format.

Usage: make_registration_seeds.py OUTDIR
"""
import os
import struct
import sys
import uuid

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_ipc_pickles  # noqa: E402
from gpu_worker import LAYOUTS, Worker  # noqa: E402


def fuzz_input(chunk_byte, flags, frames):
    out = bytes([chunk_byte, flags])
    for f in frames:
        out += struct.pack("<H", min(len(f), 0xFFFF)) + f[:0xFFFF]
    return out


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    specs = [dict(layout=name, head_size=576 if name.startswith("mla") else 32) for name in LAYOUTS]
    specs.append(dict(groups=[dict(layout="lbhnc", layers=2), dict(layout="lbhnc", layers=2, heads=1, window=32)]))
    for i, spec in enumerate(specs):
        worker = Worker(f"lmc_seed_{uuid.uuid4().hex[:8]}", layers=2, blocks=16, block_size=16, **spec)
        try:
            frames = [msgpack.packb(f, use_bin_type=True) for f in worker.register_frames(7, "seed-model")]
            ids = [list(range(1, 9)) for _ in worker.groups]
            frames.append(msgpack.packb(ids))
            with open(os.path.join(out, f"registration_{i}"), "wb") as f:
                f.write(fuzz_input(3, 1, frames))
        finally:
            worker.close()
    # One wrapper in the msgpack map form (a non-mainline client).
    w = make_ipc_pickles.torch_wrapper(make_ipc_pickles.CUDA[make_ipc_pickles.NEWEST], "bfloat16",
                                       (16, 2, 16, 64), seed=4)
    frames = [msgpack.packb(7), msgpack.packb([msgpack.ExtType(1, make_ipc_pickles.map_form(w))]),
              msgpack.packb("seed-model"), msgpack.packb(1), msgpack.packb("vllm"),
              msgpack.packb({"kv_layout": "HND"}), msgpack.packb([]), msgpack.packb([list(range(1, 9))])]
    with open(os.path.join(out, "registration_map_form"), "wb") as f:
        f.write(fuzz_input(3, 1, frames))


if __name__ == "__main__":
    main()
