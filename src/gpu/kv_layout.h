// KvLayout: what register_kv_cache's tensors say about a worker's paged KV
// cache, checked once at registration, and the checks every STORE/RETRIEVE
// makes of its block ids before any copy is planned.
//
// Accepted (spec 10.5: the vLLM formats a C++ daemon needs):
//   NHD  per layer [2, num_blocks, block_size, heads, head_size]  (flash-attn)
//   HND  per layer [2, num_blocks, heads, block_size, head_size]  (kv_layout "HND")
//   MLA  per layer [num_blocks, block_size, dim]
// shapes in the physical order the wrapper sends (it permutes views to
// contiguous order), head_size (or dim) contiguous. Every layer must have the
// same dtype, shape, strides and device; layout hints, where given, must agree
// with the shape. Anything else is refused with what was found, never guessed
// (field notes #4247: an inferred layout corrupts silently).
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv_index.h"
#include "lmcache/status.h"
#include "protocol/device_ipc_wrapper.h"
#include "protocol/gpu_messages.h"

namespace lmcache::gpu {

enum class KvFormat : std::uint8_t { kNhd, kHnd, kMla };
const char* KvFormatName(KvFormat format);

using LayoutHints = protocol::LayoutHints;

struct KvLayout {
  KvFormat format = KvFormat::kNhd;
  std::string dtype;
  std::uint32_t element_size = 0;
  std::string device_uuid;
  kv::PagedGeometry geometry{};
  std::vector<protocol::DeviceIpcWrapper> layers;  // in the engine's layer order

  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers.size()); }
  // The L1 object of one chunk (spec 5.8): [planes, layers, chunk, heads * head_bytes].
  kv::ObjectGeometry Object(std::int64_t chunk_tokens) const;
  std::uint64_t ObjectBytes(std::int64_t chunk_tokens) const;
};

Result<KvLayout> DetectKvLayout(std::span<const protocol::DeviceIpcWrapper> layers,
                                const LayoutHints& hints);

// Whether a chunk of `chunk_tokens` tokens is a whole number of blocks.
Status CheckChunkSize(const KvLayout& layout, std::int64_t chunk_tokens);

// The blocks `tokens` tokens need (spec 10.1: every chunk's blocks), each a
// block of the cache: a short list or an id out of range fails closed.
Status CheckBlockIds(const KvLayout& layout, std::int64_t tokens,
                     std::span<const std::int32_t> block_ids);

}  // namespace lmcache::gpu
