// KvLayout: what a register_kv_cache says about a worker's paged KV cache,
// checked once at registration: its KV groups (engine_group_infos), each a
// set of layers of one format and geometry (kv_format.h) with its own block
// table and window, and the L1 object one chunk of it becomes.
//
// The object of a chunk holds every group's part back to back, in group
// order (the reference's one object group of several kernel groups): group
// g's part is [planes, L_g, slots_g, row_g] where planes is 2 for formats
// that keep K and V apart (0, 1, 2, 6, 7) and 1 for packed K|V rows (12, 13:
// per head, K then V) and MLA (3), row_g = heads * head_bytes, and slots_g
// the tokens kept per chunk: the whole chunk, or for a sliding-window group
// whose window is shorter than a chunk, its last `window` tokens.
//
// The object layout differs by format (same bytes, other order), so it is
// part of what a registration binds: `object_namespace` is 0 for the
// reference's own layouts (one full-attention group of a split format,
// [2, L, T, NH*HS], or MLA [L, T, C]), which the engine-driven path shares,
// and a fingerprint of the layout for every other one; object keys carry it,
// so bytes stored by a client of one layout are never served to another.
//
// Refused, with what was found and what to change: groups whose layers
// differ in dtype, shape or strides; a layer in two groups; a group whose
// tokens_per_block differs from its tensors' block size (compressed or
// kernel-split blocks); a chunk that is not whole blocks; hints that disagree
// with the tensors; layers on different GPUs. Layers no group names are
// KV-sharing aliases and are skipped.
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpu/kv_format.h"
#include "kv_index.h"
#include "lmcache/status.h"
#include "protocol/device_ipc_wrapper.h"
#include "protocol/gpu_messages.h"

namespace lmcache::gpu {

// One layer: the tensor (allocation) it lives in, and where its element 0 is.
struct LayerRef {
  std::size_t tensor = 0;       // index into KvLayout::tensors
  std::uint64_t first_byte = 0; // from the allocation's base
};

struct KvGroupLayout {
  KvFormat format = KvFormat::kNhd;
  std::string dtype;
  std::uint32_t element_size = 0;
  kv::PagedGeometry paged{};   // one layer's cache (every layer of the group alike)
  std::vector<LayerRef> layers;
  std::int64_t window_tokens = -1;         // -1: full attention
  std::optional<std::int32_t> null_block;  // the engine's placeholder block (vLLM: 0)
  std::int64_t slots = 0;                  // tokens of each chunk its part keeps
  std::uint64_t object_offset = 0;         // where its part starts in an object

  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers.size()); }
  kv::ObjectGeometry object() const {
    return {paged.planes, num_layers(), slots, paged.heads * paged.head_bytes};
  }
  std::uint64_t part_bytes() const;
  // The part's tensor shape in elements: [planes, L, slots, row] (MLA, format
  // 3: [L, slots, C], as the engine-driven path describes it).
  std::vector<std::int64_t> ObjectShape() const;
  // The chunk's first token this group's part keeps.
  std::int64_t first_kept_token(std::int64_t chunk_tokens) const { return chunk_tokens - slots; }
};

struct KvLayout {
  std::string device_uuid;
  std::vector<protocol::DeviceIpcWrapper> tensors;  // as registered: mappings, bounds, refcounters
  std::vector<KvGroupLayout> groups;
  std::int64_t chunk_tokens = 0;
  std::uint64_t object_bytes = 0;
  std::uint32_t object_namespace = 0;

  // "2 groups: NL_X_NB_NH_BS_CS (12) bfloat16 x 28 layers [1, 28, 256, 1024] ..."
  std::string Describe() const;
};

Result<KvLayout> DetectKvLayout(const protocol::KvCacheRegistration& registration,
                                std::int64_t chunk_tokens);

}  // namespace lmcache::gpu
