// The gather (paged cache -> object) and scatter (object -> paged cache)
// kernels. One thread block copies one unit at a time (a run of bytes
// contiguous on both sides, kv_index.h), in 16-byte vectors when both ends
// and the length allow, else byte by byte; blocks stride over the units.
#include <cuda_runtime.h>

#include "kv_copy.h"

namespace lmcache::kv {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxBlocks = 4096;

__device__ void CopyRun(uint8_t* dst, const uint8_t* src, int64_t bytes) {
  const bool vectors = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                         static_cast<uintptr_t>(bytes)) & 15) == 0;
  if (vectors) {
    uint4* d = reinterpret_cast<uint4*>(dst);
    const uint4* s = reinterpret_cast<const uint4*>(src);
    for (int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) d[i] = s[i];
  } else {
    for (int64_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
}

template <bool kGather>
__global__ void CopyUnits(ChunkCopy c, const uint64_t* layer_bases, uint8_t* object, Cancellation cancel) {
  if (cancel.cancelled != nullptr && *cancel.cancelled == cancel.ticket) return;
  const int64_t units = UnitCount(c);
  const int64_t run_bytes = RunBytes(c.paged);
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const UnitAddress a = Locate(c, u);
    if (!Copied(c, a, kGather)) continue;
    uint8_t* paged = reinterpret_cast<uint8_t*>(layer_bases[a.layer]) + a.paged;
    uint8_t* in_object = object + a.object;
    if (kGather) {
      CopyRun(in_object, paged, run_bytes);
    } else {
      CopyRun(paged, in_object, run_bytes);
    }
  }
}

int Blocks(const ChunkCopy& c) {
  const int64_t units = UnitCount(c);
  return static_cast<int>(units < kMaxBlocks ? (units > 0 ? units : 1) : kMaxBlocks);
}

}  // namespace

int LaunchGather(const ChunkCopy& c, const uint64_t* layer_bases, void* object, void* stream,
                 Cancellation cancel) {
  CopyUnits<true><<<Blocks(c), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      c, layer_bases, static_cast<uint8_t*>(object), cancel);
  return static_cast<int>(cudaGetLastError());
}

int LaunchScatter(const ChunkCopy& c, const uint64_t* layer_bases, const void* object,
                  void* stream, Cancellation cancel) {
  CopyUnits<false><<<Blocks(c), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      c, layer_bases, static_cast<uint8_t*>(const_cast<void*>(object)), cancel);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace lmcache::kv
