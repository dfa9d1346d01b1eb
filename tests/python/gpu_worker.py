"""An emulated GPU worker of the CUDA-IPC path, for a server run with
--gpu-backend emulated (src/gpu/emulated_backend.h describes the format).

Its "device memory" is one shared-memory segment holding every layer's paged
KV cache (as one cudaMalloc would), its events are 8-byte words of a second
segment. It registers the way the reference client does: register_kv_cache
with one msgpack ext 1 per layer, holding pickle.dumps() of a
RawCudaIPCWrapper (the upstream class path and attribute layout, written by
Python's own pickle; make_ipc_pickles.py defines the classes), whose 64
handle bytes name the segment instead of a cudaIpcMemHandle_t.
"""

import mmap
import os
import pickle
import struct
import time

import msgpack
import numpy as np

import make_ipc_pickles as wrappers

OP_REGISTER_KV_CACHE = "register_kv_cache"
OP_UNREGISTER_KV_CACHE = "unregister_kv_cache"
OP_STORE = "store"
OP_RETRIEVE = "retrieve"

EVENT_FAILED = 1 << 63
EVENT_WORDS = 64


def memory_handle(shm_name):
    return (b"LMCEMUM\0" + shm_name.encode()).ljust(64, b"\0")


def event_handle(shm_name, offset, value):
    return (b"LMCEMUE\0" + struct.pack("<QQ", offset, value) + shm_name.encode()).ljust(64, b"\0")


def map_segment(shm_name, size=None):
    path = f"/dev/shm/{shm_name}"
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if size else 0), 0o600)
    try:
        if size:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size or os.fstat(fd).st_size)
    finally:
        os.close(fd)


def kv_cache_frames(handle, layers, layer_bytes, shape, device_uuid):
    """register_kv_cache's kv_cache: per layer, msgpack ext 1 holding the pickle of the
    RawCudaIPCWrapper a reference worker makes of a contiguous bfloat16 layer at
    offset layer * layer_bytes of the allocation `handle` names."""
    out = []
    for index in range(layers):
        w = wrappers.RawCudaIPCWrapper.__new__(wrappers.RawCudaIPCWrapper)
        w._ipc_handle_reserved = handle
        w._alloc_offset = index * layer_bytes
        w._nbytes = layer_bytes
        w.handle = None
        w.dtype = wrappers.torch.bfloat16
        w.shape = shape
        w.stride = wrappers.contiguous(shape)
        w.storage_offset = 0
        w._opens = 0
        w.device_uuid = device_uuid
        out.append(msgpack.ExtType(1, pickle.dumps(w)))
    return out


def wait_server_event(handle, timeout_s=10.0):
    """True once the server's event completed, False if it completed as failed."""
    assert len(handle) == 64 and handle[:8] == b"LMCEMUE\0", handle
    offset, value = struct.unpack("<QQ", handle[8:24])
    name = handle[24:].split(b"\0")[0].decode()
    segment = map_segment(name)
    word = np.frombuffer(segment, dtype=np.uint64, count=1, offset=offset)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        w = int(word[0])
        if w & EVENT_FAILED:
            return False
        if w >= value:
            return True
        time.sleep(0.001)
    raise AssertionError(f"the server's event did not complete within {timeout_s} s")


class Worker:
    """One engine process's paged caches (layers x [2, blocks, block_size, heads, head_size]
    for NHD, [2, blocks, heads, block_size, head_size] for HND, [blocks, block_size, dim] for
    MLA; bfloat16 carried as uint16) and its events."""

    def __init__(self, name, layout="NHD", layers=3, blocks=32, block_size=16, heads=4,
                 head_size=32):
        self.name, self.layout, self.layers = name, layout, layers
        self.blocks, self.block_size, self.heads, self.head_size = blocks, block_size, heads, head_size
        if layout == "NHD":
            self.shape = (2, blocks, block_size, heads, head_size)
        elif layout == "HND":
            self.shape = (2, blocks, heads, block_size, head_size)
        elif layout == "MLA":
            self.shape = (blocks, block_size, head_size)
        else:
            raise ValueError(layout)
        self.layer_bytes = int(np.prod(self.shape)) * 2
        self.memory_name = f"{name}_kv"
        self.events_name = f"{name}_ev"
        self.memory = map_segment(self.memory_name, self.layers * self.layer_bytes)
        self.events = map_segment(self.events_name, EVENT_WORDS * 8)
        self.event_words = np.frombuffer(self.events, dtype=np.uint64)
        self.next_event = 0
        self.instance_id = None

    def close(self):
        for segment in (self.memory_name, self.events_name):
            try:
                os.unlink(f"/dev/shm/{segment}")
            except FileNotFoundError:
                pass

    def layer(self, index):
        return np.frombuffer(self.memory, dtype=np.uint16, count=self.layer_bytes // 2,
                             offset=index * self.layer_bytes).reshape(self.shape)

    def block(self, index, block):
        """Every byte of one block of one layer (both planes), as a copy."""
        t = self.layer(index)
        return (t[block] if self.layout == "MLA" else t[:, block]).copy()

    def wrapper_pickles(self):
        return kv_cache_frames(memory_handle(self.memory_name), self.layers, self.layer_bytes,
                               self.shape, "emulated-gpu-0")

    def register(self, client, instance_id, model, world_size=1):
        self.instance_id = instance_id
        hints = {"kv_layout": "HND" if self.layout == "HND" else "NHD",
                 "num_kv_heads": self.heads, "tokens_per_block": self.block_size}
        return client.request(OP_REGISTER_KV_CACHE, instance_id, self.wrapper_pickles(), model,
                              world_size, "vllm", hints, [])

    def new_event(self):
        """A fresh engine event (not yet complete) and a function that completes it."""
        offset = (self.next_event % EVENT_WORDS) * 8
        value = self.next_event // EVENT_WORDS + 1
        self.next_event += 1
        index = offset // 8

        def record():
            self.event_words[index] = value

        return event_handle(self.events_name, offset, value), record
