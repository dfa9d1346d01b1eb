// kv_copy.h: launchers of the KV gather/scatter kernels (kv_copy.cu), built
// by nvcc whenever the CUDA toolkit is found. The index math is kv_index.h's,
// the same the host emulation runs.
//
// Pointers are device addresses: `layer_bases` an array of each layer's
// paged cache base, c.block_ids the chunk's block ids, `object` the chunk's
// staging buffer (device memory, or pinned host memory mapped for the device).
// `stream` is a cudaStream_t. A copy whose `*cancelled` equals `ticket` when
// it starts copies nothing (a transfer that failed after it was queued:
// `cancelled` is pinned host memory the host writes before it lets the
// stream run; null: never cancelled). The launchers return a cudaError_t as
// an int (0 = launched); the copy completes in stream order.
//
// Thread-safety: as the CUDA runtime (any thread, per stream ordering).
#pragma once

#include <stdint.h>

#include "kv_index.h"

namespace lmcache::kv {

struct Cancellation {
  const volatile uint64_t* cancelled;
  uint64_t ticket;
};

int LaunchGather(const ChunkCopy& c, const uint64_t* layer_bases, void* object, void* stream,
                 Cancellation cancel);
int LaunchScatter(const ChunkCopy& c, const uint64_t* layer_bases, const void* object, void* stream,
                  Cancellation cancel);

}  // namespace lmcache::kv
