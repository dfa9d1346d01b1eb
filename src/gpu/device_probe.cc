#include "gpu/device_probe.h"

#include <string>

#if LMC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace lmcache::gpu {

Status CheckCudaDeviceVisible() {
  const std::string fix =
      "; the CUDA-IPC path needs the server on the node of the GPUs (container: --gpus, and a "
      "shared /dev/shm); engines without one can use the shared-memory path "
      "(register_kv_cache_engine_driven_context)";
#if LMC_HAVE_CUDA
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return Status(ErrorCode::kNotSupported, std::string("no CUDA device visible to the server (") +
                                                cudaGetErrorString(error) + ")" + fix);
  }
  if (count == 0) {
    return Status(ErrorCode::kNotSupported, "no CUDA device visible to the server" + fix);
  }
  return Status::Ok();
#else
  return Status(ErrorCode::kNotSupported,
                "no CUDA device visible to the server (built without the CUDA toolkit)" + fix);
#endif
}

}  // namespace lmcache::gpu
