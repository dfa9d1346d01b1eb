#!/usr/bin/env python3
"""Writes real pickles of LMCache's CUDA IPC wrappers for the C++ decoder's tests.

The reference client sends each registered KV tensor as pickle.dumps(wrapper)
(spec 4.6). This script defines classes under the upstream module paths with
the upstream attribute layout (lmcache/v1/platform/cuda/ipc_wrapper.py), a
stand-in `torch` module whose dtypes pickle as the globals torch.<name> as
PyTorch's do, and lets Python's own pickle write them in protocols 2 to 5.
No PyTorch or GPU is needed: the bytes are what pickle makes of that state.

Usage: make_ipc_pickles.py OUTDIR
Writes OUTDIR/<case>.p<protocol>.pickle and OUTDIR/cases.json, which lists
each file with the fields the decoder must return, or the error it must give.
"""
import json
import os
import pickle
import sys
import types


def module(name):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    return sys.modules[name]


torch = module("torch")


class dtype:
    """Pickles as the global torch.<name>, as torch.dtype.__reduce__ makes it."""

    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __reduce__(self):
        return self.name


dtype.__module__ = "torch"
DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4, "float8_e4m3fn": 1, "uint8": 1}
for _name, _size in DTYPES.items():
    setattr(torch, _name, dtype(_name, _size))


def define(path, name, base=object):
    cls = type(name, (base,), {})
    cls.__module__ = path
    cls.__qualname__ = name
    setattr(module(path), name, cls)
    return cls


DeviceIPCWrapper = define("lmcache.v1.platform.base.ipc_wrapper", "DeviceIPCWrapper")
CudaIPCWrapper = define("lmcache.v1.platform.cuda.ipc_wrapper", "CudaIPCWrapper", DeviceIPCWrapper)
RawCudaIPCWrapper = define("lmcache.v1.platform.cuda.ipc_wrapper", "RawCudaIPCWrapper",
                           DeviceIPCWrapper)
OldCudaIPCWrapper = define("lmcache.v1.multiprocess.custom_types", "CudaIPCWrapper")
CpuShmTensorWrapper = define("lmcache.v1.platform.cpu.shm", "CpuShmTensorWrapper", DeviceIPCWrapper)

UUID = "6b1c8c6e-2f5d-4a8e-9f63-0c2d7e4b9a11"


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


def torch_wrapper(cls, dt, shape, stride=None, storage_offset=0, offset_bytes=0,
                  size_bytes=None, seed=1):
    """The state CudaIPCWrapper.__init__ leaves, in its order."""
    stride = stride or contiguous(shape)
    if size_bytes is None:
        size_bytes = (storage_offset + numel(shape)) * DTYPES[dt]
    w = cls.__new__(cls)
    # storage._share_cuda_(): (device, handle, size_bytes, offset_bytes,
    #  ref_counter_handle, ref_counter_offset, event_handle, event_sync_required)
    w.handle = (0, mem_handle(seed), size_bytes, offset_bytes, b"/torch_4242_1234567890_0", 0,
                bytes(64), True)
    w.dtype = getattr(torch, dt)
    w.shape = tuple(shape)
    w.stride = tuple(stride)
    w.storage_offset = storage_offset
    w.device_uuid = UUID
    return w


def raw_wrapper(dt, shape, stride=None, alloc_offset=0, nbytes=None, storage_offset=0, seed=2):
    """The state RawCudaIPCWrapper.__init__ leaves, in its order."""
    w = RawCudaIPCWrapper.__new__(RawCudaIPCWrapper)
    w._ipc_handle_reserved = mem_handle(seed)
    w._alloc_offset = alloc_offset
    w._nbytes = numel(shape) * DTYPES[dt] if nbytes is None else nbytes
    w.handle = None
    w.dtype = getattr(torch, dt)
    w.shape = tuple(shape)
    w.stride = tuple(stride or contiguous(shape))
    w.storage_offset = storage_offset
    w._opens = 0
    w.device_uuid = UUID
    return w


def expect(w, kind, seed, byte_offset, storage_bytes):
    return {"kind": kind, "dtype": w.dtype.name, "element_size": w.dtype.itemsize,
            "shape": list(w.shape), "stride": list(w.stride),
            "storage_offset": w.storage_offset, "device_uuid": UUID,
            "mem_handle": mem_handle(seed).hex(), "storage_byte_offset": byte_offset,
            "storage_bytes": storage_bytes}


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pickled code ran",))


def valid_cases():
    nhd = torch_wrapper(CudaIPCWrapper, "bfloat16", (2, 64, 16, 8, 128), offset_bytes=1 << 20, seed=3)
    hnd_shape = (2, 64, 8, 16, 128)  # vLLM's NHD view over HND memory, permuted to physical order
    hnd = torch_wrapper(CudaIPCWrapper, "float16", hnd_shape, seed=4)
    view = torch_wrapper(CudaIPCWrapper, "float16", (2, 32, 16, 4, 64), storage_offset=4096,
                         offset_bytes=512, seed=5)
    mla = torch_wrapper(CudaIPCWrapper, "float8_e4m3fn", (100, 16, 576), seed=6)
    old = torch_wrapper(OldCudaIPCWrapper, "float32", (2, 10, 16, 2, 32), seed=7)
    raw = raw_wrapper("bfloat16", (2, 50, 16, 4, 64), alloc_offset=2 << 20, seed=8)
    size = lambda w: w.handle[2]
    return {
        "nhd": (nhd, expect(nhd, "torch", 3, 1 << 20, size(nhd))),
        "hnd": (hnd, expect(hnd, "torch", 4, 0, size(hnd))),
        "storage_view": (view, expect(view, "torch", 5, 512, size(view))),
        "mla": (mla, expect(mla, "torch", 6, 0, size(mla))),
        "old_class_path": (old, expect(old, "torch", 7, 0, size(old))),
        "raw": (raw, expect(raw, "raw", 8, 2 << 20, raw._nbytes)),
    }


def invalid_cases():
    short_storage = torch_wrapper(CudaIPCWrapper, "float16", (2, 8, 16, 2, 64))
    short_storage.handle = short_storage.handle[:2] + (100,) + short_storage.handle[3:]
    short_handle = torch_wrapper(CudaIPCWrapper, "float16", (2, 8, 16, 2, 64))
    short_handle.handle = (0, b"\x01" * 63) + short_handle.handle[2:]
    text_dtype = torch_wrapper(CudaIPCWrapper, "float16", (4, 4))
    text_dtype.dtype = "float16"
    missing = torch_wrapper(CudaIPCWrapper, "float16", (4, 4))
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
        "view_past_storage": (short_storage, "reaches byte"),
        "short_mem_handle": (short_handle, "'handle[1]' is not 64 bytes"),
        "dtype_as_text": (text_dtype, "field 'dtype' is a str, not a global"),
        "missing_uuid": (missing, "field 'device_uuid' is missing"),
        "raw_not_contiguous": (raw_strided, "not contiguous"),
        "raw_wrong_nbytes": (raw_nbytes, "_nbytes is 31"),
        "plain_dict": ({"shape": (1, 2)}, "holds a dict, not a wrapper"),
        "deep_nesting": (nested, "nested deeper than"),
        "too_many_values": (list(range(5000)), "stack deeper than 256"),
        "list_inside_itself": (self_list, "a container inside itself"),
    }


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = []
    for protocol in (2, 3, 4, 5):
        for name, (obj, fields) in valid_cases().items():
            data = pickle.dumps(obj, protocol=protocol)
            assert pickle.loads(data).__dict__ == obj.__dict__  # Python reads back what it wrote
            cases.append(write(out, name, protocol, data, {"expect": fields}))
        for name, (obj, error) in invalid_cases().items():
            cases.append(write(out, name, protocol, pickle.dumps(obj, protocol=protocol),
                               {"error": error}))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def write(out, name, protocol, data, outcome):
    file = f"{name}.p{protocol}.pickle"
    with open(os.path.join(out, file), "wb") as f:
        f.write(data)
    return {"file": file, "protocol": protocol, **outcome}


if __name__ == "__main__":
    main()
