// DeviceIpcWrapper: one registered KV tensor as register_kv_cache describes
// it (spec 4.6), decoded from the pickle the reference client sends inside
// msgpack ext 1.
//
// Two wrapper classes are accepted, under their upstream class paths
// (lmcache.v1.platform.cuda.ipc_wrapper, and the older
// lmcache.v1.multiprocess.custom_types for CudaIPCWrapper):
//   CudaIPCWrapper     handle = PyTorch's _share_cuda_() tuple; the server uses
//                      handle[1] (the 64-byte cudaIpcMemHandle_t of the whole
//                      cudaMalloc block), handle[2] (the storage's bytes) and
//                      handle[3] (the storage's byte offset in the block);
//   RawCudaIPCWrapper  _ipc_handle_reserved (64 bytes), _alloc_offset,
//                      _nbytes; contiguous, storage_offset 0.
// plus the common fields dtype (a torch.<dtype> global), shape, stride,
// storage_offset (elements) and device_uuid. Anything else (another class, a
// global that is not a known dtype, a field of the wrong type, a view that
// reaches past its storage) is kMalformedRequest naming the field.
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
inline constexpr std::size_t kMaxTensorRank = 8;

enum class IpcWrapperKind : std::uint8_t { kTorchStorage, kRawCuda };

struct DeviceIpcWrapper {
  IpcWrapperKind kind = IpcWrapperKind::kRawCuda;
  std::string dtype;              // the torch name: "float16", "bfloat16", ...
  std::uint32_t element_size = 0; // bytes per element
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> stride;   // in elements, physical order as sent
  std::int64_t storage_offset = 0;    // elements from the storage's first byte
  std::string device_uuid;
  std::array<std::uint8_t, kCudaIpcHandleBytes> mem_handle{};
  std::uint64_t storage_byte_offset = 0;  // the storage's offset in the allocation
  std::uint64_t storage_bytes = 0;        // bytes of the storage

  // Offset of element 0 from the allocation's base, in bytes.
  std::uint64_t first_byte() const {
    return storage_byte_offset + static_cast<std::uint64_t>(storage_offset) * element_size;
  }
  // Bytes from element 0 to one past the last element the view reaches.
  std::uint64_t span_bytes() const;
};

// The element size of a torch dtype name, or nullopt for a name not known.
std::optional<std::uint32_t> TorchDtypeSize(std::string_view name);

// Decodes one wrapper from its pickle bytes (the body of msgpack ext 1).
Result<DeviceIpcWrapper> DecodeDeviceIpcWrapper(std::string_view pickle);

}  // namespace lmcache::protocol
