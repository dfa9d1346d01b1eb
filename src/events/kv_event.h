// KvEvent: one record of the KV event log: objects of one model that one
// medium came to hold or lost, in the reference's terms (its KVEventRecord,
// lmcache/v1/multiprocess/custom_types.py): kind "stored" or "removed",
// medium "CPU" (L1) or "STORAGE" (an L2 adapter), the chunk hashes, and for
// a stored chunk its parent's hash and its token ids.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/object_key.h"

namespace lmcache::events {

enum class KvEventKind : std::uint8_t {
  kStored,   // the medium holds these chunks now
  kRemoved,  // the medium no longer holds them (evicted, deleted)
  kCleared,  // the medium dropped everything (clear)
};

// The reference's spelling ("stored", "removed"; "cleared" is ours).
std::string_view KindName(KvEventKind kind);

inline constexpr std::string_view kMediumCpu = "CPU";
inline constexpr std::string_view kMediumStorage = "STORAGE";

struct KvEvent {
  std::uint64_t seq = 0;  // consecutive from 1 within one incarnation
  KvEventKind kind = KvEventKind::kStored;
  std::string medium;    // kMediumCpu or kMediumStorage
  std::string location;  // "L1", or the L2 adapter's description ("fs:/data/l2")
  std::string model_name;
  // The cache salt's and request tags' tenant as an opaque name (a keyed
  // hash of the salt and the tags, with a key drawn at startup; tagged and
  // untagged objects of a chunk share its hash): events of one tenant are told apart from
  // another's without publishing the salt. Empty for unsalted objects.
  std::string tenant;
  std::vector<store::ChunkHash> block_hashes;
  std::optional<store::ChunkHash> parent_block_hash;  // stored: the previous chunk's; none for the first
  // Stored: the chunk's tokens, shared with the token bindings (a store
  // storm would otherwise copy every chunk's tokens once more).
  std::shared_ptr<const std::vector<std::uint32_t>> tokens;
  std::uint32_t block_size = 0;                       // tokens per chunk
  double timestamp = 0;                               // wall clock, seconds since the epoch

  std::span<const std::uint32_t> token_ids() const {
    return tokens ? std::span<const std::uint32_t>(*tokens) : std::span<const std::uint32_t>();
  }
  // What the record costs in the log (its bound is in bytes; shared tokens
  // are counted in full, as if the bindings had forgotten them).
  std::size_t Bytes() const;
};

}  // namespace lmcache::events
