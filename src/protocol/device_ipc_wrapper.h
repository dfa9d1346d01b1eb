// DeviceIpcWrapper: one registered KV tensor as register_kv_cache describes
// it (../shared/reference/gpu-registration.md section 2), decoded from the
// body of msgpack ext 1: pickle.dumps(wrapper) (first byte 0x80, PROTO), or
// the msgpack map a non-mainline client sends ({magic:
// "lmcache.cuda_ipc_wrapper", version: 1, kind: "cuda"|"raw", ...}).
//
// The wrapper class is matched by name in any lmcache.* module (its module
// moved several times: lmcache.v1.multiprocess.custom_types,
// lmcache.v1.platform.cuda.ipc_wrapper, platform/backends/cuda,
// platform/devices/cuda):
//   CudaIPCWrapper     handle = the 8-tuple of PyTorch's
//                      UntypedStorage._share_cuda_(): (device, shareable
//                      handle, storage bytes, storage byte offset in the
//                      cudaMalloc block, refcounter shm name, refcounter
//                      slot, event handle (64), event_sync_required);
//   RawCudaIPCWrapper  _ipc_handle_reserved (the 64-byte cudaIpcMemHandle_t
//                      of the allocation), _alloc_offset (bytes, absent in
//                      the oldest form: 0), _nbytes; a contiguous tensor;
//   VmmCudaIPCWrapper  refused (its memory travels as a file descriptor out
//                      of band; the server cannot import it).
// plus dtype (a torch.<dtype> global, or "torch.<dtype>" in the map form),
// shape, stride, storage_offset (elements) and device_uuid.
//
// The shareable handle (handle[1]) is versioned since PyTorch 2.5:
// [version][type][payload]. 64 bytes is a legacy raw cudaIpcMemHandle_t;
// type 'c' (version 1 to 3) carries the 64-byte handle of the whole
// cudaMalloc segment (66 bytes in all); type 'e' (expandable segments) is
// refused with the setting that causes it. Anything else (another class, a
// global that is not a known dtype, a field of the wrong type, a view that
// reaches past its storage) is kMalformedRequest naming the field; what is
// well formed but not servable is kNotSupported naming the cause and fix.
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::protocol {

inline constexpr std::size_t kCudaIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)
inline constexpr std::size_t kCudaIpcEventBytes = 64;   // sizeof(cudaIpcEventHandle_t)
inline constexpr std::size_t kMaxTensorRank = 8;
// PyTorch's refcounter files hold 10000 int64 slots (CUDA_IPC_REF_COUNTER_FILE_SIZE).
inline constexpr std::uint64_t kTorchRefCounterSlots = 10000;

enum class IpcWrapperKind : std::uint8_t { kTorchStorage, kRawCuda };

using MemHandle = std::array<std::uint8_t, kCudaIpcHandleBytes>;

// How the allocation's handle was sent (diagnostics; the payload is the same).
enum class ShareableHandleForm : std::uint8_t {
  kRaw,          // 64 bytes: a cudaIpcMemHandle_t (RawCudaIPCWrapper, PyTorch < 2.5)
  kTorchCudaMalloc,  // PyTorch's [version]['c'][cudaIpcMemHandle_t]
};

// PyTorch's IPC reference counter of a shared storage: the int64 slot
// `index` of the shared-memory file `shm_name`, which the receiver
// decrements when it stops using the storage (so the engine may free it).
struct TorchRefCounter {
  std::string shm_name;  // "/torch_<pid>_<random>_<n>"
  std::uint64_t index = 0;
};

struct DeviceIpcWrapper {
  IpcWrapperKind kind = IpcWrapperKind::kRawCuda;
  std::string dtype;              // the torch name: "float16", "bfloat16", ...
  std::uint32_t element_size = 0; // bytes per element
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> stride;   // in elements, physical order as sent
  std::int64_t storage_offset = 0;    // elements from the storage's first byte
  std::string device_uuid;
  MemHandle mem_handle{};             // the cudaIpcMemHandle_t of the allocation
  ShareableHandleForm handle_form = ShareableHandleForm::kRaw;
  std::uint8_t handle_version = 0;    // PyTorch's version byte (kTorchCudaMalloc)
  std::uint64_t storage_byte_offset = 0;  // the storage's offset in the allocation
  std::uint64_t storage_bytes = 0;        // bytes of the storage
  std::optional<TorchRefCounter> ref_counter;  // CudaIPCWrapper only
  std::array<std::uint8_t, kCudaIpcEventBytes> event_handle{};  // handle[6]
  bool event_sync_required = false;                             // handle[7]

  // Offset of element 0 from the allocation's base, in bytes.
  std::uint64_t first_byte() const {
    return storage_byte_offset + static_cast<std::uint64_t>(storage_offset) * element_size;
  }
  // Bytes from element 0 to one past the last element the view reaches.
  std::uint64_t span_bytes() const;
  // The end of the view from the allocation's base, in bytes.
  std::uint64_t end_byte() const { return first_byte() + span_bytes(); }
};

// The element size of a torch dtype name, or nullopt for a name not known.
std::optional<std::uint32_t> TorchDtypeSize(std::string_view name);

// Decodes one wrapper from the body of msgpack ext 1 (a pickle, or the map form).
Result<DeviceIpcWrapper> DecodeDeviceIpcWrapper(std::string_view body);

// The allocation handle inside a shareable handle (handle[1]): 64 raw bytes,
// or PyTorch's versioned form. `what` names the field in errors.
Status ParseShareableHandle(std::string_view bytes, std::string_view what, DeviceIpcWrapper* out);

}  // namespace lmcache::protocol
