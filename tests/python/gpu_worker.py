"""An emulated vLLM worker of the CUDA-IPC path, for a server run with
--gpu-backend emulated (src/gpu/emulated_backend.h describes the format).

It registers its paged KV cache exactly as the LMCache MP connector does
(../shared/reference/gpu-registration.md): register_kv_cache with seven
frames, each layer a msgpack ext 1 holding pickle.dumps() of a CudaIPCWrapper
(the newest upstream class path and attribute layout, written by Python's
own pickle; make_ipc_pickles.py defines the classes), whose handle is the
8-tuple of UntypedStorage._share_cuda_() with PyTorch >= 2.5's 66-byte
versioned 'c' handle and a refcounter in a shared-memory file laid out as
PyTorch's RefcountedMapAllocator lays it out, and layout_hints and
engine_group_infos as the connector builds them.

The tensors are those vLLM allocates, version by version (section 4): each
KV group is one allocation (a shared-memory segment standing in for a
cudaMalloc segment: its 64 handle bytes name the segment instead of a
cudaIpcMemHandle_t); per-layer tensors (vLLM <= 0.28) are storages at
offsets of it, as blocks of PyTorch's caching allocator are, and from 0.29
every layer is an as_strided view into it. What the worker sends as shape,
stride and storage_offset is what CudaIPCWrapper makes of vLLM's view:
attempt_permute_to_contiguous_view (LMCache kv_format/contiguity.py) sorts
the axes by descending stride unless PyTorch already calls the view
contiguous, which it does when the permuted axes have size 1.
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
REFCOUNTER_SLOTS = 10000  # CUDA_IPC_REF_COUNTER_FILE_SIZE
REFCOUNTER_HEADER = 64  # map_alloc_alignment: an int map count, then the int64 slots
DEVICE_UUID = "6b1c8c6e-2f5d-4a8e-9f63-0c2d7e4b9a11"

# vLLM's memory order of one KV group, outermost first, and the per-layer
# view vLLM hands the connector (kv: K or V; b: block; n: token; h: head;
# d: head dim; c: packed content = kv * HS + d; l: layer of a shared
# allocation; "h1": the one head of MLA from 0.29).
LAYOUTS = {
    # <= 0.22 FlashAttention [2, NB, BS, NH, HS] (format 1); HND is its stride order (0, 1, 3, 2, 4)
    "flash_attn_nhd": dict(hint="NHD", memory="kv b n h d", view="kv b n h d"),
    "flash_attn_hnd": dict(hint="HND", memory="kv b h n d", view="kv b n h d"),
    # FlashInfer <= 0.22 and every backend 0.23-0.25 (vllm #42095): [NB, 2, BS, NH, HS]
    "blocks_first_nhd": dict(hint="NHD", memory="b kv n h d", view="b kv n h d"),
    "blocks_first_hnd": dict(hint="HND", memory="b kv h n d", view="b kv n h d"),
    # 0.26-0.28 (vllm #44455): packed [NB, NH, BS, 2*HS]; NHD is a permuted view of it
    "packed_hnd": dict(hint="HND", memory="b h n c", view="b h n c"),
    "packed_nhd": dict(hint="NHD", memory="b n h c", view="b h n c"),
    # >= 0.29 (vllm #51718): layers' as_strided [B, H, N, C] views into one allocation per group
    "lbhnc": dict(hint="LBHNC", memory="l b h n c", view="b h n c"),
    "lbnhc": dict(hint="LBNHC", memory="l b n h c", view="b h n c"),
    "blhnc": dict(hint="BLHNC", memory="b l h n c", view="b h n c"),
    # MLA: [NB, BS, C] through 0.28; [NB, 1, BS, C] views from 0.29
    "mla": dict(hint="NHD", memory="b n c", view="b n c"),
    "mla_4d": dict(hint="LBHNC", memory="l b h1 n c", view="b h1 n c"),
    # cross-layer: one tensor [NB, NL, 2, BS, NH, HS], sent bare
    "cross_layer": dict(hint="NHD", memory="b l kv n h d", view="b l kv n h d"),
}
NUMPY = {1: np.uint8, 2: np.uint16, 4: np.uint32}
DTYPE_OF = {1: "uint8", 2: "bfloat16", 4: "float32"}


def memory_handle(shm_name):
    return (b"LMCEMUM\0" + shm_name.encode()).ljust(64, b"\0")


def shareable_handle(shm_name, version=2):
    """PyTorch >= 2.5's shareable handle: [version]['c'][the segment's handle]."""
    return bytes([version]) + b"c" + memory_handle(shm_name)


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


def unlink(shm_name):
    try:
        os.unlink(f"/dev/shm/{shm_name}")
    except FileNotFoundError:
        pass


def torch_is_contiguous(shape, strides):
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def permute_to_contiguous_view(axes, shape, strides):
    """LMCache's attempt_permute_to_contiguous_view: unchanged if PyTorch calls
    the view contiguous, else its axes by descending stride (a stable sort)."""
    if torch_is_contiguous(shape, strides):
        return axes, shape, strides
    order = sorted(range(len(shape)), key=lambda i: strides[i], reverse=True)
    return [axes[i] for i in order], [shape[i] for i in order], [strides[i] for i in order]


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


class RefCounters:
    """A PyTorch IPC refcounter file (RefcountedMapAllocator): the sender's
    map count 1 at byte 0, int64 slots from byte 64, each share setting one to 1."""

    def __init__(self, name):
        self.name = name
        self.segment = map_segment(name, REFCOUNTER_HEADER + 8 * REFCOUNTER_SLOTS)
        struct.pack_into("<i", self.segment, 0, 1)
        self.next = 0

    def share(self):
        slot = self.next
        self.next += 1
        struct.pack_into("<q", self.segment, REFCOUNTER_HEADER + 8 * slot, 1)
        return slot

    def slot(self, index):
        return struct.unpack_from("<q", self.segment, REFCOUNTER_HEADER + 8 * index)[0]

    def maps(self):
        return struct.unpack_from("<i", self.segment, 0)[0]


class KvGroup:
    """One KV group's allocation and its layers' wrappers."""

    def __init__(self, worker, index, layout, layers, blocks, block_size, heads, head_size,
                 element_size, pad=0, window=-1, null_block_id=0):
        spec = LAYOUTS[layout]
        self.layout, self.hint = layout, spec["hint"]
        self.layers, self.blocks, self.block_size = layers, blocks, block_size
        self.heads = 1 if layout.startswith("mla") else heads
        self.head_size, self.element_size = head_size, element_size
        self.window, self.null_block_id = window, null_block_id
        self.mla = layout.startswith("mla")
        sizes = {"kv": 2, "b": blocks, "n": block_size, "h": self.heads, "d": head_size, "l": layers,
                 "c": head_size if self.mla else 2 * head_size, "h1": 1}
        self.memory = spec["memory"].split()
        shape = [sizes[a] for a in self.memory]
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1] + (pad if i == 0 else 0)
        self.strides = dict(zip(self.memory, strides))
        storage = strides[0] * shape[0]  # elements
        self.shared = "l" in self.memory
        self.cross_layer = layout == "cross_layer"
        self.storage_bytes = storage * element_size
        self.layer_stride = (self.storage_bytes + 511) // 512 * 512  # caching-allocator blocks
        self.first_byte = 512  # the first storage's offset in the segment (handle[3])
        size = self.first_byte + (self.storage_bytes if self.shared else self.layer_stride * layers)
        self.name = f"{worker.name}_g{index}"
        self.segment = map_segment(self.name, size)
        self.bytes = np.frombuffer(self.segment, dtype=np.uint8)
        self.view_axes = spec["view"].split()
        self.sizes = sizes
        self.refcounters = worker.refcounters

    def close(self):
        unlink(self.name)

    def wrappers(self):
        """register_kv_cache's kv_cache entries: CudaIPCWrapper pickles in ext 1."""
        out = []
        count = 1 if self.cross_layer else self.layers
        for layer in range(count):
            axes = self.view_axes
            shape = [self.sizes[a] for a in axes]
            strides = [self.strides[a] for a in axes]
            axes, shape, strides = permute_to_contiguous_view(axes, shape, strides)
            storage_offset = layer * self.strides["l"] if self.shared and not self.cross_layer else 0
            byte_offset = self.first_byte + (0 if self.shared else layer * self.layer_stride)
            w = wrappers.CUDA[wrappers.NEWEST].__new__(wrappers.CUDA[wrappers.NEWEST])
            w.handle = (0, shareable_handle(self.name), self.storage_bytes, byte_offset,
                        ("/" + self.refcounters.name).encode(), self.refcounters.share(),
                        bytes(64), False)
            w.dtype = wrappers.torch_dtype(DTYPE_OF[self.element_size])
            w.shape = tuple(shape)
            w.stride = tuple(strides)
            w.storage_offset = storage_offset
            w.device_uuid = DEVICE_UUID
            out.append(msgpack.ExtType(1, pickle.dumps(w)))
        return out

    def element_bytes(self, layer):
        """Layer `layer` as a numpy view [kv, block, token, head, byte] of the allocation."""
        e = self.element_size
        base = self.first_byte + (0 if self.shared else layer * self.layer_stride)
        if self.shared:
            base += layer * self.strides["l"] * e
        row = self.head_size * e
        kv_stride = self.strides["kv"] * e if "kv" in self.strides else row  # packed: V after K
        head_stride = self.strides.get("h", self.strides.get("h1", 0)) * e
        shape = (1 if self.mla else 2, self.blocks, self.block_size, self.heads, row)
        strides = (kv_stride, self.strides["b"] * e, self.strides["n"] * e, head_stride, 1)
        return np.lib.stride_tricks.as_strided(self.bytes[base:], shape=shape, strides=strides)

    def block(self, layer, block):
        return self.element_bytes(layer)[:, block].copy()

    def fill(self, ids, rng):
        for layer in range(self.layers):
            view = self.element_bytes(layer)
            for b in ids:
                view[:, b] = rng.integers(0, 256, size=view[:, b].shape, dtype=np.uint8)

    def info(self, index, layer_indices):
        info = {"engine_group_id": index, "layer_indices": layer_indices,
                "tokens_per_block": self.block_size, "sw_size_tokens": self.window,
                "extra_object_group_tag": None, "recurrent_state": False}
        if self.null_block_id != 0:
            info["null_block_id"] = self.null_block_id
        return info


class Worker:
    """One engine process: its KV groups, its refcounters and its events."""

    def __init__(self, name, layout="lbhnc", layers=3, blocks=32, block_size=16, heads=4,
                 head_size=32, element_size=2, pad=0, groups=None):
        self.name = name
        self.refcounters = RefCounters(f"torch_{os.getpid()}_{name}_0")
        specs = groups or [dict(layout=layout, layers=layers)]
        self.groups = []
        for i, g in enumerate(specs):
            args = dict(layout=layout, layers=layers, blocks=blocks, block_size=block_size, heads=heads,
                        head_size=head_size, element_size=element_size, pad=pad)
            args.update(g)
            self.groups.append(KvGroup(self, i, **args))
        self.events_name = f"{name}_ev"
        self.events = map_segment(self.events_name, EVENT_WORDS * 8)
        self.event_words = np.frombuffer(self.events, dtype=np.uint64)
        self.next_event = 0
        self.instance_id = None

    @property
    def main(self):
        return self.groups[0]

    def close(self):
        for g in self.groups:
            g.close()
        unlink(self.events_name)
        unlink(self.refcounters.name)

    def register_frames(self, instance_id, model, world_size=1):
        kv, infos = [], []
        for i, g in enumerate(self.groups):
            first = len(kv)
            kv.extend(g.wrappers())
            infos.append(g.info(i, list(range(first, len(kv)))))
        if self.main.cross_layer:
            kv = kv[0]  # one bare tensor
        infos = infos if len(self.groups) > 1 else []
        return [instance_id, kv, model, world_size, "vllm", {"kv_layout": self.main.hint}, infos]

    def register(self, client, instance_id, model, world_size=1):
        self.instance_id = instance_id
        return client.request(OP_REGISTER_KV_CACHE, *self.register_frames(instance_id, model, world_size))

    def new_event(self):
        """A fresh engine event (not yet complete) and a function that completes it."""
        offset = (self.next_event % EVENT_WORDS) * 8
        value = self.next_event // EVENT_WORDS + 1
        self.next_event += 1
        index = offset // 8

        def record():
            self.event_words[index] = value

        return event_handle(self.events_name, offset, value), record


def kv_cache_frames(handle, layers, layer_bytes, shape, device_uuid):
    """register_kv_cache's kv_cache as a TRT-LLM-style client sends it
    (isolated IPC): per layer a RawCudaIPCWrapper of a contiguous bfloat16
    layer at offset layer * layer_bytes of the allocation `handle` names
    (the 64-byte cudaIpcMemHandle_t of its base). cuda_worker.py uses it."""
    out = []
    for index in range(layers):
        w = wrappers.RAW[wrappers.NEWEST].__new__(wrappers.RAW[wrappers.NEWEST])
        w._ipc_handle_reserved = handle
        w._alloc_offset = index * layer_bytes
        w._nbytes = layer_bytes
        w.handle = None
        w.dtype = wrappers.torch_dtype("bfloat16")
        w.shape = shape
        w.stride = wrappers.contiguous(shape)
        w.storage_offset = 0
        w._opens = 0
        w.device_uuid = device_uuid
        out.append(msgpack.ExtType(1, pickle.dumps(w)))
    return out
