// CudaSupport: what the CUDA backend's files share (built with the toolkit
// only): CUDA errors as Status, the worker's device by UUID, and the few
// driver calls the runtime has no form of (stream memory operations, an
// allocation's real extent), resolved through cudaGetDriverEntryPointByVersion
// so the server links no libcuda and starts on machines without a driver.
//
// Thread-safety: any thread; Driver() resolves once.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "lmcache/status.h"

namespace lmcache::gpu {

Status CudaError(const char* call, cudaError_t error);
Status DriverError(const char* call, CUresult result);

#define LMC_CUDA_RETURN(call)                                                    \
  do {                                                                           \
    const cudaError_t lmc_cuda_error = (call);                                   \
    if (lmc_cuda_error != cudaSuccess) return CudaError(#call, lmc_cuda_error);  \
  } while (0)

// The device ordinal of a GPU UUID as str(CUuuid) prints it (8-4-4-4-12 hex;
// a "GPU-" prefix and upper case accepted); kNotSupported naming it if the
// server cannot see it. Makes no CUDA context.
Result<int> DeviceOfUuid(const std::string& uuid);

struct DriverCalls {
  CUresult (*stream_wait_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  CUresult (*stream_write_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
};
Result<const DriverCalls*> Driver();

}  // namespace lmcache::gpu
