"""A PyTorch-free CUDA worker of the CUDA-IPC path, for a server run with
--gpu-backend cuda on a machine with an NVIDIA GPU.

It speaks to the CUDA runtime through ctypes (libcudart from the toolkit in
/usr/local/cuda), allocates each layer's paged KV cache with cudaMalloc in one
allocation, shares it with cudaIpcGetMemHandle, records its events with
interprocess CUDA events, and registers like the reference client:
register_kv_cache with one msgpack ext 1 per layer holding pickle.dumps() of
a RawCudaIPCWrapper (gpu_worker.kv_cache_frames). test_gpu_cuda.py and tools/gpu_bench.py use it.
"""

import ctypes
import ctypes.util
import glob

import numpy as np

from gpu_worker import kv_cache_frames

H2D, D2H = 1, 2
EVENT_DISABLE_TIMING, EVENT_INTERPROCESS = 2, 4


def load_cudart():
    candidates = sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"), reverse=True)
    found = ctypes.util.find_library("cudart")
    candidates += ([found] if found else []) + ["libcudart.so.13", "libcudart.so.12"]
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


class IpcHandle(ctypes.Structure):
    """cudaIpcEventHandle_t / cudaIpcMemHandle_t: 64 bytes, passed by value
    where the runtime takes the handle itself (a char* would be read as the
    struct's first bytes off the stack)."""

    _fields_ = [("reserved", ctypes.c_char * 64)]

    @classmethod
    def of(cls, data):
        assert len(data) == 64, len(data)
        h = cls()
        ctypes.memmove(ctypes.byref(h), data, 64)
        return h


class Cuda:
    """The few runtime calls a worker needs; each raises on an error."""

    def __init__(self):
        self.lib = load_cudart()
        if self.lib is None:
            raise RuntimeError("libcudart not found under /usr/local/cuda/lib64")
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p

    def check(self, name, *args):
        err = getattr(self.lib, name)(*args)
        if err != 0:
            raise RuntimeError(f"{name}: {self.lib.cudaGetErrorString(err).decode()}")

    def device_count(self):
        n = ctypes.c_int(0)
        return n.value if self.lib.cudaGetDeviceCount(ctypes.byref(n)) == 0 else 0

    def uuid(self, device):
        prop = ctypes.create_string_buffer(8192)  # cudaDeviceProp: name[256], then the uuid
        fn = getattr(self.lib, "cudaGetDeviceProperties_v2", None) or self.lib.cudaGetDeviceProperties
        err = fn(prop, ctypes.c_int(device))
        if err != 0:
            raise RuntimeError(f"cudaGetDeviceProperties: {self.lib.cudaGetErrorString(err).decode()}")
        b = prop.raw[256:272].hex()
        return f"GPU-{b[0:8]}-{b[8:12]}-{b[12:16]}-{b[16:20]}-{b[20:32]}"

    def malloc(self, nbytes):
        ptr = ctypes.c_void_p()
        self.check("cudaMalloc", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        return ptr.value

    def free(self, ptr):
        self.lib.cudaFree(ctypes.c_void_p(ptr))

    def host_alloc(self, nbytes):
        ptr = ctypes.c_void_p()
        self.check("cudaMallocHost", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        return ptr.value

    def copy(self, dst, src, nbytes, kind):
        self.check("cudaMemcpy", ctypes.c_void_p(dst), ctypes.c_void_p(src), ctypes.c_size_t(nbytes),
                   ctypes.c_int(kind))

    def copy_async(self, dst, src, nbytes, kind, stream=0):
        self.check("cudaMemcpyAsync", ctypes.c_void_p(dst), ctypes.c_void_p(src),
                   ctypes.c_size_t(nbytes), ctypes.c_int(kind), ctypes.c_void_p(stream))

    def synchronize(self):
        self.check("cudaDeviceSynchronize")

    def stream_synchronize(self, stream=0):
        self.check("cudaStreamSynchronize", ctypes.c_void_p(stream))

    def mem_handle(self, ptr):
        handle = ctypes.create_string_buffer(64)
        self.check("cudaIpcGetMemHandle", handle, ctypes.c_void_p(ptr))
        return handle.raw

    def recorded_event(self):
        """An interprocess event recorded now on the default stream, and its handle."""
        event = ctypes.c_void_p()
        self.check("cudaEventCreateWithFlags", ctypes.byref(event),
                   ctypes.c_uint(EVENT_DISABLE_TIMING | EVENT_INTERPROCESS))
        self.check("cudaEventRecord", event, ctypes.c_void_p(0))
        handle = ctypes.create_string_buffer(64)
        self.check("cudaIpcGetEventHandle", handle, event)
        return event, handle.raw

    def wait_ipc_event(self, handle):
        """Blocks until the event another process exported completes."""
        event = ctypes.c_void_p()
        self.check("cudaIpcOpenEventHandle", ctypes.byref(event), IpcHandle.of(handle))
        try:
            self.check("cudaEventSynchronize", event)
        finally:
            self.lib.cudaEventDestroy(event)


class CudaWorker:
    """One engine's NHD paged caches, layers x [2, blocks, block_size, heads, head_size]
    bfloat16 (carried as uint16), in one cudaMalloc allocation; with `mla`,
    layers x [blocks, block_size, head_size] (format 3: head_size is the
    latent width, 576 for DeepSeek's)."""

    def __init__(self, cuda, layers=4, blocks=64, block_size=16, heads=8, head_size=128, mla=False):
        self.cuda = cuda
        self.layers, self.blocks, self.block_size = layers, blocks, block_size
        self.mla = mla
        self.shape = (blocks, block_size, head_size) if mla else (2, blocks, block_size, heads, head_size)
        self.token_bytes = self.token_bytes_of(heads=heads, head_size=head_size, mla=mla)
        self.layer_bytes = int(np.prod(self.shape)) * 2
        self.base = cuda.malloc(layers * self.layer_bytes)
        self.handle = cuda.mem_handle(self.base)
        self.uuid = cuda.uuid(0)
        self.instance_id = None
        self.events = []  # kept alive until the server is done with them

    @staticmethod
    def token_bytes_of(heads=8, head_size=128, mla=False, **_):
        """Bytes of one token of one layer (bfloat16): what a chunk's object holds per token and layer."""
        return head_size * 2 if mla else 2 * heads * head_size * 2

    def close(self):
        self.cuda.free(self.base)

    def wrapper_pickles(self):
        return kv_cache_frames(self.handle, self.layers, self.layer_bytes, self.shape, self.uuid)

    def register(self, client, instance_id, model, world_size=1):
        self.instance_id = instance_id
        hints = {"kv_layout": "NHD", "tokens_per_block": self.block_size}
        if not self.mla:
            hints["num_kv_heads"] = self.shape[3]
        return client.request("register_kv_cache", instance_id, self.wrapper_pickles(), model,
                              world_size, "vllm", hints, [])

    def layer(self, index):
        """A host copy of one layer."""
        host = np.empty(self.shape, dtype=np.uint16)
        self.cuda.copy(host.ctypes.data, self.base + index * self.layer_bytes, self.layer_bytes, D2H)
        return host

    def write_layer(self, index, values):
        values = np.ascontiguousarray(values, dtype=np.uint16)
        self.cuda.copy(self.base + index * self.layer_bytes, values.ctypes.data, self.layer_bytes, H2D)

    def engine_event(self):
        event, handle = self.cuda.recorded_event()
        self.events.append(event)
        return handle
