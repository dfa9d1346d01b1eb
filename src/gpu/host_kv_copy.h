// HostKvCopy: the emulation's gather and scatter, run on the CPU over memory
// the server maps (shared memory standing in for device memory), with the
// index math of the CUDA kernels (csrc/kv_index.h) unit by unit, so a test
// without a GPU checks the very offsets the GPU computes.
//
// Thread-safety: pure functions; callers own the memory they pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kv_index.h"

namespace lmcache::gpu {

// Copies chunk `c` from the paged caches at `layer_bases` (one per layer) into `object`.
void HostGather(const kv::ChunkCopy& c, std::span<std::byte* const> layer_bases, std::byte* object);
// Copies chunk `c` from `object` into the paged caches, leaving tokens before c.skip_tokens.
void HostScatter(const kv::ChunkCopy& c, std::span<std::byte* const> layer_bases,
                 const std::byte* object);

}  // namespace lmcache::gpu
