#!/usr/bin/env python3
"""Writes the bodies of LMCache's CUDA IPC wrappers (msgpack ext 1) for the C++
decoder's tests, as current clients send them.

The reference client sends each registered KV tensor as pickle.dumps(wrapper)
(gpu-registration.md section 2). This script defines the wrapper classes under
every module path they have lived at (lmcache.v1.multiprocess.custom_types,
lmcache.v1.platform.cuda.ipc_wrapper, lmcache.v1.platform.backends.cuda.ipc_wrapper,
lmcache.v1.platform.devices.cuda.ipc_wrapper), with the attribute layout their
__init__ leaves (CudaIPCWrapper: handle, dtype, shape, stride, storage_offset,
device_uuid; RawCudaIPCWrapper: _ipc_handle_reserved, _alloc_offset, _nbytes,
handle=None, ..., _opens), a stand-in `torch` module whose dtypes pickle as
the globals torch.<name> as PyTorch's do (torch.dtype.__reduce__ returns its
name), and lets Python's own pickle write them in protocols 2 to 5 (4 is what
pickle.dumps uses on Python 3.8-3.13, 5 on 3.14).

`handle` is the 8-tuple of UntypedStorage._share_cuda_() (torch/csrc/
StorageSharing.cpp): (device, shareable handle, storage bytes, storage byte
offset in the cudaMalloc segment, refcounter shm name, refcounter slot,
event handle (64 bytes), event_sync_required). The shareable handle is
PyTorch >= 2.5's versioned form (CUDACachingAllocator shareIpcHandle):
a version byte (2 up to torch 2.12, 3 from 2.13), the type 'c' (cudaMalloc)
and the 64-byte cudaIpcMemHandle_t of the segment: 66 bytes; 'e' is the
expandable-segments form the server refuses. The msgpack map form is the one
a non-mainline custom_types.py writes (magic "lmcache.cuda_ipc_wrapper").

No PyTorch or GPU is needed: the bytes are what pickle (and msgpack) make of
that state. Usage: make_ipc_pickles.py OUTDIR
Writes OUTDIR/<case>.p<protocol>.pickle (and <case>.map.msgpack) and
OUTDIR/cases.json, which lists each file with the fields the decoder must
return, or the error it must give.
"""
import json
import os
import pickle
import sys
import types

import msgpack


def module(name):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    return sys.modules[name]


class dtype:
    """Pickles as the global torch.<name>, as torch.dtype.__reduce__ makes it."""

    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __reduce__(self):
        return self.name

    def __str__(self):
        return "torch." + self.name


dtype.__module__ = "torch"
DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4, "float8_e4m3fn": 1, "uint8": 1}
try:
    # Where PyTorch is installed (the GPU machine: test_gpu_torch.py wraps
    # real tensors), its own dtypes are used: they pickle to the same globals,
    # and pickle insists that torch.<name> be the very object it writes.
    import torch
except ImportError:
    torch = module("torch")
    for _name, _size in DTYPES.items():
        setattr(torch, _name, dtype(_name, _size))


def torch_dtype(name):
    """torch.<name>: PyTorch's own where it has it, else a stand-in registered
    on the module (Debian's PyTorch 1.13 has no float8_e4m3fn). Only the name
    and size in DTYPES are read back: torch.dtype has no .name, and no
    .itemsize before 2.1."""
    found = getattr(torch, name, None)
    if found is None:
        found = dtype(name, DTYPES[name])
        setattr(torch, name, found)
    return found


def dtype_name(dt):
    return str(dt).removeprefix("torch.")


def define(path, name, base=object):
    cls = type(name, (base,), {})
    cls.__module__ = path
    cls.__qualname__ = name
    setattr(module(path), name, cls)
    return cls


NEWEST = "lmcache.v1.platform.devices.cuda.ipc_wrapper"
PATHS = ["lmcache.v1.multiprocess.custom_types", "lmcache.v1.platform.cuda.ipc_wrapper",
         "lmcache.v1.platform.backends.cuda.ipc_wrapper", NEWEST]
DeviceIPCWrapper = define("lmcache.v1.platform.base.ipc_wrapper", "DeviceIPCWrapper")
CUDA = {p: define(p, "CudaIPCWrapper", DeviceIPCWrapper) for p in PATHS}
RAW = {p: define(p, "RawCudaIPCWrapper", CUDA[p]) for p in PATHS}
VmmCudaIPCWrapper = define(NEWEST, "VmmCudaIPCWrapper", DeviceIPCWrapper)
CpuShmTensorWrapper = define("lmcache.v1.platform.cpu.shm", "CpuShmTensorWrapper", DeviceIPCWrapper)

UUID = "6b1c8c6e-2f5d-4a8e-9f63-0c2d7e4b9a11"  # str(torch.cuda.get_device_properties(i).uuid)
REFCOUNTER = b"/torch_4242_3141592653_0"  # at::NewProcessWideShmHandle()


def contiguous(shape):
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= d
    return tuple(reversed(stride))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def mem_handle(seed):
    return bytes((seed * 7 + i * 13) % 256 for i in range(64))


def shareable(seed, version=2, kind=b"c"):
    """PyTorch's shareable handle: [version][type][cudaIpcMemHandle_t]."""
    return bytes([version]) + kind + mem_handle(seed)


def torch_wrapper(cls, dt, shape, stride=None, storage_offset=0, offset_bytes=0,
                  size_bytes=None, seed=1, handle=None, sync=True, slot=3):
    """The state CudaIPCWrapper.__init__ leaves, in its order."""
    stride = stride or contiguous(shape)
    if size_bytes is None:
        size_bytes = (storage_offset + numel(shape)) * DTYPES[dt]
    w = cls.__new__(cls)
    w.handle = (0, shareable(seed) if handle is None else handle, size_bytes, offset_bytes,
                REFCOUNTER, slot, bytes(range(64)), sync)
    w.dtype = torch_dtype(dt)
    w.shape = tuple(shape)
    w.stride = tuple(stride)
    w.storage_offset = storage_offset
    w.device_uuid = UUID
    return w


def raw_wrapper(dt, shape, stride=None, alloc_offset=0, nbytes=None, storage_offset=0, seed=2,
                path=NEWEST, oldest=False):
    """The state RawCudaIPCWrapper.__init__ leaves, in its order (oldest: custom_types's)."""
    w = RAW[path].__new__(RAW[path])
    w._ipc_handle_reserved = mem_handle(seed)
    if not oldest:
        w._alloc_offset = alloc_offset
    w._nbytes = numel(shape) * DTYPES[dt] if nbytes is None else nbytes
    w.handle = None
    w.dtype = torch_dtype(dt)
    w.shape = tuple(shape)
    w.stride = tuple(stride or contiguous(shape))
    w.storage_offset = storage_offset
    if not oldest:
        w._opens = 0
    w.device_uuid = UUID
    return w


def vmm_wrapper():
    """VmmCudaIPCWrapper.__getstate__: its fd travels out of band."""
    w = VmmCudaIPCWrapper.__new__(VmmCudaIPCWrapper)
    w.__dict__.update({"_export_id": bytes(16), "_kind": "posix_fd", "_fabric_blob": None,
                       "_fd": None, "_alloc_size": 1 << 21, "_alloc_offset": 0, "_nbytes": 4096,
                       "handle": bytes(16), "dtype": torch_dtype("bfloat16"), "shape": (4, 512),
                       "stride": (512, 1), "storage_offset": 0, "device_uuid": UUID, "_opens": 0})
    return w


def expect(w, kind, seed, byte_offset, storage_bytes, form="torch_cuda_malloc", version=2):
    e = {"kind": kind, "dtype": dtype_name(w.dtype), "element_size": DTYPES[dtype_name(w.dtype)],
         "shape": list(w.shape), "stride": list(w.stride),
         "storage_offset": w.storage_offset, "device_uuid": UUID,
         "mem_handle": mem_handle(seed).hex(), "storage_byte_offset": byte_offset,
         "storage_bytes": storage_bytes, "handle_form": form, "handle_version": version}
    if kind == "torch":
        e.update({"ref_counter": REFCOUNTER.decode(), "ref_counter_index": w.handle[5],
                  "event_sync_required": w.handle[7]})
    return e


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pickled code ran",))


def valid_cases():
    size = lambda w: w.handle[2]
    cases = {}
    for i, path in enumerate(PATHS):
        # vLLM >= 0.29 packed [NB, NH, BS, 2*HS] layer views into one allocation (LBHNC).
        w = torch_wrapper(CUDA[path], "bfloat16", (64, 8, 16, 256), storage_offset=3 * 64 * 8 * 16 * 256,
                          size_bytes=28 * 64 * 8 * 16 * 256 * 2, offset_bytes=1 << 21, seed=3 + i)
        cases[f"packed_view_{path.split('.')[3]}"] = (w, expect(w, "torch", 3 + i, 1 << 21, size(w)))
    v3 = torch_wrapper(CUDA[NEWEST], "float16", (2, 64, 8, 16, 128), seed=9,
                       handle=shareable(9, version=3), sync=False)  # torch 2.13
    cases["torch_2_13_version_3"] = (v3, expect(v3, "torch", 9, 0, size(v3), version=3))
    legacy = torch_wrapper(CUDA[PATHS[0]], "float32", (2, 10, 16, 2, 32), seed=7, handle=mem_handle(7))
    cases["torch_before_2_5_raw_64"] = (legacy, expect(legacy, "torch", 7, 0, size(legacy), "raw", 0))
    mla = torch_wrapper(CUDA[NEWEST], "float8_e4m3fn", (100, 16, 576), seed=6)
    cases["mla"] = (mla, expect(mla, "torch", 6, 0, size(mla)))
    padded = (50, 2, 16, 4, 64)  # blocks-first with dim-0 padding: block stride past its contents
    pad = torch_wrapper(CUDA[NEWEST], "bfloat16", padded, stride=(2 * 16 * 4 * 64 + 64, 16 * 4 * 64, 4 * 64, 64, 1),
                        size_bytes=50 * (2 * 16 * 4 * 64 + 64) * 2, seed=10)
    cases["dim0_padded"] = (pad, expect(pad, "torch", 10, 0, size(pad)))
    raw = raw_wrapper("bfloat16", (2, 50, 16, 4, 64), alloc_offset=2 << 20, seed=8)
    cases["raw"] = (raw, expect(raw, "raw", 8, 2 << 20, raw._nbytes, "raw", 0))
    old_raw = raw_wrapper("bfloat16", (2, 8, 16, 4, 64), storage_offset=128, nbytes=(128 + 2 * 8 * 16 * 4 * 64) * 2,
                          seed=11, path=PATHS[0], oldest=True)
    cases["raw_oldest"] = (old_raw, expect(old_raw, "raw", 11, 0, old_raw._nbytes, "raw", 0))
    return cases


def invalid_cases():
    short_storage = torch_wrapper(CUDA[NEWEST], "float16", (2, 8, 16, 2, 64))
    short_storage.handle = short_storage.handle[:2] + (100,) + short_storage.handle[3:]
    short_handle = torch_wrapper(CUDA[NEWEST], "float16", (2, 8, 16, 2, 64), handle=b"\x01" * 63)
    expandable = torch_wrapper(CUDA[NEWEST], "float16", (4, 4),
                               handle=bytes([2]) + b"e" + bytes(40))  # expandable segments
    future = torch_wrapper(CUDA[NEWEST], "float16", (4, 4), handle=shareable(1, version=9))
    long_c = torch_wrapper(CUDA[NEWEST], "float16", (4, 4), handle=shareable(1) + b"\0")
    six_items = torch_wrapper(CUDA[NEWEST], "float16", (4, 4))
    six_items.handle = six_items.handle[:6]
    sneaky = torch_wrapper(CUDA[NEWEST], "float16", (4, 4))
    sneaky.handle = sneaky.handle[:4] + (b"/../lmcache_l1_pool_1",) + sneaky.handle[5:]
    text_dtype = torch_wrapper(CUDA[NEWEST], "float16", (4, 4))
    text_dtype.dtype = "float16"
    missing = torch_wrapper(CUDA[NEWEST], "float16", (4, 4))
    del missing.device_uuid
    raw_strided = raw_wrapper("float16", (4, 4), stride=(1, 4))
    raw_nbytes = raw_wrapper("float16", (4, 4), nbytes=31)
    cpu = torch_wrapper(CpuShmTensorWrapper, "float16", (4, 4))
    nested = []
    deep = nested
    for _ in range(40):
        deep.append([])
        deep = deep[0]
    self_list = []
    self_list.append(self_list)
    return {
        "os_system": (Evil(), "global 'posix.system' is not accepted"),
        "other_class": (cpu, "global 'lmcache.v1.platform.cpu.shm.CpuShmTensorWrapper' is not accepted"),
        "vmm": (vmm_wrapper(), "VmmCudaIPCWrapper"),
        "expandable_segments": (expandable, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        "future_handle_version": (future, "version 9"),
        "long_cuda_malloc_handle": (long_c, "not 66"),
        "six_item_handle": (six_items, "has 6 items"),
        "refcounter_path": (sneaky, "not one safe file name"),
        "view_past_storage": (short_storage, "reaches byte"),
        "short_mem_handle": (short_handle, "is 63 bytes"),
        "dtype_as_text": (text_dtype, "field 'dtype' is a str, not a global"),
        "missing_uuid": (missing, "field 'device_uuid' is missing"),
        "raw_not_contiguous": (raw_strided, "not contiguous"),
        "raw_wrong_nbytes": (raw_nbytes, "of a storage of 31 bytes"),
        "plain_dict": ({"shape": (1, 2)}, "holds a dict, not a wrapper"),
        "deep_nesting": (nested, "nested deeper than"),
        "too_many_values": (list(range(5000)), "stack deeper than 256"),
        "list_inside_itself": (self_list, "a container inside itself"),
    }


def map_form(w):
    """custom_types.py's CudaIPCWrapper.Serialize: a msgpack map, not a pickle."""
    raw = type(w).__name__ == "RawCudaIPCWrapper"
    payload = {"magic": "lmcache.cuda_ipc_wrapper", "version": 1, "kind": "raw" if raw else "cuda",
               "handle": None if raw else list(w.handle), "dtype": str(w.dtype),
               "shape": list(w.shape), "stride": list(w.stride),
               "storage_offset": w.storage_offset, "device_uuid": w.device_uuid}
    if raw:
        payload["ipc_handle_reserved"] = w._ipc_handle_reserved
        payload["nbytes"] = w._nbytes
    return msgpack.packb(payload, use_bin_type=True)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = []
    for protocol in (2, 3, 4, 5):
        for name, (obj, fields) in valid_cases().items():
            data = pickle.dumps(obj, protocol=protocol)
            assert pickle.loads(data).__dict__ == obj.__dict__  # Python reads back what it wrote
            cases.append(write(out, name, f"p{protocol}.pickle", data, {"expect": fields}))
        for name, (obj, error) in invalid_cases().items():
            cases.append(write(out, name, f"p{protocol}.pickle", pickle.dumps(obj, protocol=protocol),
                               {"error": error}))
    for name in ("torch_2_13_version_3", "packed_view_custom_types", "raw_oldest"):
        obj, fields = valid_cases()[name]
        if name == "raw_oldest":
            fields = dict(fields, storage_byte_offset=0)
        cases.append(write(out, name, "map.msgpack", map_form(obj), {"expect": fields}))
    bad_map = msgpack.packb({"magic": "lmcache.cuda_ipc_wrapper", "version": 2}, use_bin_type=True)
    cases.append(write(out, "map_version_2", "map.msgpack", bad_map, {"error": "wire version 2"}))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def write(out, name, suffix, data, outcome):
    file = f"{name}.{suffix}"
    with open(os.path.join(out, file), "wb") as f:
        f.write(data)
    return {"file": file, **outcome}


if __name__ == "__main__":
    main()
