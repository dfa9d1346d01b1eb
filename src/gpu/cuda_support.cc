#include "gpu/cuda_support.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <mutex>

namespace lmcache::gpu {
namespace {

std::string UuidText(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[40];
  std::snprintf(text, sizeof(text),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return text;
}

// "GPU-6b1c..." or "6B1C..." -> "6b1c...".
std::string NormalUuid(std::string uuid) {
  if (uuid.rfind("GPU-", 0) == 0) uuid = uuid.substr(4);
  std::transform(uuid.begin(), uuid.end(), uuid.begin(), [](unsigned char c) { return std::tolower(c); });
  return uuid;
}

template <typename Fn>
Status Resolve(const char* symbol, Fn* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t error = cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found);
  if (error != cudaSuccess) return CudaError(symbol, error);
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return Status(ErrorCode::kNotSupported, std::string("the CUDA driver has no ") + symbol +
                                                " (a driver of CUDA 12 or newer is needed)");
  }
  *out = reinterpret_cast<Fn>(fn);
  return Status::Ok();
}

}  // namespace

Status CudaError(const char* call, cudaError_t error) {
  return Status(ErrorCode::kInternal, std::string(call) + ": " + cudaGetErrorString(error));
}

Status DriverError(const char* call, CUresult result) {
  return Status(ErrorCode::kInternal, std::string(call) + ": CUDA driver error " + std::to_string(result));
}

Result<int> DeviceOfUuid(const std::string& uuid) {
  int count = 0;
  LMC_CUDA_RETURN(cudaGetDeviceCount(&count));
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    LMC_CUDA_RETURN(cudaGetDeviceProperties(&p, i));
    if (UuidText(p.uuid) == NormalUuid(uuid)) return i;
  }
  return Status(ErrorCode::kNotSupported,
                "the worker's GPU " + uuid + " is not visible to the server (of " +
                    std::to_string(count) + " it sees): give the server the same GPUs "
                    "(CUDA_VISIBLE_DEVICES, --gpus)");
}

Result<const DriverCalls*> Driver() {
  static DriverCalls calls;
  static Status resolved;
  static std::once_flag once;
  std::call_once(once, [] {
    resolved = Resolve("cuStreamWaitValue64", &calls.stream_wait_value64);
    if (resolved.ok()) resolved = Resolve("cuStreamWriteValue64", &calls.stream_write_value64);
    if (resolved.ok()) resolved = Resolve("cuMemGetAddressRange", &calls.mem_get_address_range);
  });
  if (!resolved.ok()) return resolved;
  return &calls;
}

}  // namespace lmcache::gpu
