// The reference's cross-node operations on the wire (p2p-spec.md section 4):
// p2p_lookup_and_lock (29) takes the keys a peer wants and the layout of
// each object group it expects and answers a task id;
// p2p_query_lookup_results (30) takes the task id and answers, per key in
// request order, the object's address in the owner's registered L1 (a byte
// offset from its base, and its length), {offset: -1, size: 0} for a miss,
// or nil while nothing is ready; p2p_unlock_objects (31) takes keys and
// answers nil.
//
// Shapes, as msgspec writes the reference's dataclasses (spec 4.2):
//   ObjectKey            {chunk_hash: bin 32, model_name: str, kv_rank: int,
//                         object_group_id: int = 0, cache_salt: str = ""}
//   MemoryLayoutDesc     {shapes: [[int]], dtypes: [str]} (equal lengths)
//   group_layout_descs   {object_group_id (int): MemoryLayoutDesc}; older
//                        peers send one MemoryLayoutDesc (layout_desc)
//   TransferChannelAddress {offset: int, size: int, cxl_arena: nil,
//                         cxl_ttl_seconds: int} (older: offset, size)
// Decoding follows the rest of the wire codec: maps by field name, unknown
// fields ignored, defaulted fields optional, every count and length bounded
// before anything is kept. A peer is untrusted input: the decoders check
// the wire's shape and bounds; the owner checks a key's content (store's
// ObjectKey rules) and the layout against what it stores.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::protocol {

inline constexpr std::size_t kChunkHashBytes = 32;

// One ObjectKey as the reference sends it.
struct P2pObjectKey {
  std::string chunk_hash;  // kChunkHashBytes bytes
  std::string model_name;
  std::int64_t kv_rank = 0;
  std::int64_t object_group_id = 0;
  std::string cache_salt;
  // Ours, past the reference's fields (its decoders skip unknown fields):
  // what else names one of our objects, so a peer of ours never serves an
  // object of another layout or tag set. Written only when not empty.
  std::uint32_t layout_namespace = 0;  // "lmc_layout_namespace"
  std::string tags;                    // "lmc_tags", store::ObjectKey::tags
  bool operator==(const P2pObjectKey&) const = default;
};

// One MemoryLayoutDesc: the tensors of one object, each a shape and a
// torch dtype name ("bfloat16", "float8_e4m3fn", ...).
struct P2pLayout {
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::string> dtypes;
  bool operator==(const P2pLayout&) const = default;
};

// The layouts a lookup expects, by object group. `single` marks an older
// peer's one layout_desc (every key is expected in it, whatever its group).
struct P2pLayouts {
  std::map<std::int64_t, P2pLayout> by_group;
  bool single = false;
  bool operator==(const P2pLayouts&) const = default;
};

// Where one object lies in the owner's registered L1; a miss is {-1, 0}.
struct P2pAddress {
  std::int64_t offset = -1;
  std::int64_t size = 0;
  bool valid() const { return offset >= 0 && size > 0; }
  bool operator==(const P2pAddress&) const = default;
};

struct P2pLimits {
  std::size_t max_keys = 1u << 20;  // one lookup's keys (a 4M-token prompt's chunks x ranks)
  std::size_t max_model_name_bytes = 1024;
  std::size_t max_cache_salt_bytes = 128;
  std::size_t max_tags_bytes = 8192;  // 16 tags of a 128-byte name and value, joined
  std::size_t max_groups = 256;   // object groups of one lookup
  std::size_t max_tensors = 256;  // tensors of one layout
  std::size_t max_dims = 8;       // dimensions of one shape
  std::size_t max_dtype_bytes = 32;
};

// Operation 29's first frame, and 31's only one.
Result<std::vector<P2pObjectKey>> DecodeP2pKeys(std::string_view frame,
                                                const P2pLimits& limits = {});
// Operation 29's second frame: the group map, or an older peer's single layout.
Result<P2pLayouts> DecodeP2pLayouts(std::string_view frame, const P2pLimits& limits = {});
// Operation 30's reply: nil (nothing ready, or no such task) or one address per key.
Result<std::optional<std::vector<P2pAddress>>> DecodeP2pAddresses(std::string_view frame,
                                                                 const P2pLimits& limits = {});

// The bytes of one object of `layout`: the sum over its tensors of the
// product of the shape times the dtype's size. Refuses an unknown dtype and
// a size past 2^48 (no object is that large).
Result<std::uint64_t> P2pLayoutBytes(const P2pLayout& layout);

std::string EncodeP2pKeys(std::span<const P2pObjectKey> keys);
std::string EncodeP2pLayouts(const P2pLayouts& layouts);
// Each address with the newest reference's fields (cxl_arena nil,
// cxl_ttl_seconds 0), which older decoders ignore.
std::string EncodeP2pAddresses(std::span<const P2pAddress> addresses);

}  // namespace lmcache::protocol
