// ObjectKey: the identity of one stored object (one chunk of one KV shard).
//
// Same fields and rules as the reference (spec 4.1, 5.4, 5.6): a 32-byte BLAKE3
// chunk hash, the model name (the cache namespace; no '@'), the packed kv_rank,
// the object group id (hybrid models; 0 otherwise) and the cache salt (per-tenant
// isolation; at most 128 characters, none of '@', '/', '\\', NUL). Beyond the
// reference: the layout namespace, 0 for the reference's own object layouts
// ([2, L, T, hidden], MLA [L, T, C]) and otherwise the fingerprint of the
// layout a registration bound (packed K|V rows, several KV groups), so bytes
// in one order are never served to a client that reads another. And the
// request tags (the reference's lmcache.tag.* entries of a key's
// request_configs), so a tagged and an untagged store of the same tokens
// never share an object, in L1 or in any L2 adapter.
// Thread-safety: a plain value.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::store {

using ChunkHash = std::array<std::uint8_t, 32>;

struct ObjectKey {
  ChunkHash chunk_hash{};
  std::string model_name;
  std::int64_t kv_rank = 0;
  std::int32_t object_group_id = 0;
  std::string cache_salt;
  std::uint32_t layout_namespace = 0;
  // Canonical request tags: "name%value" pairs sorted by name and joined by
  // '%' (neither may contain one), so equal tag sets give equal strings; empty
  // when the request had none.
  std::string tags;

  bool operator==(const ObjectKey&) const = default;
  // "<hash hex prefix>@<model>@<rank>..." for logs.
  std::string DebugString() const;
};

inline constexpr std::size_t kMaxCacheSaltLength = 128;
// The reference's limit on a tag's name and on its value.
inline constexpr std::size_t kMaxTagLength = 128;
// Ours: a key names at most this many tags (the reference sets no number).
inline constexpr std::size_t kMaxTags = 16;
inline constexpr std::size_t kMaxModelNameLength = 1024;

// kInvalidKey with the offending field named, or OK.
Status ValidateModelName(const std::string& model_name);
Status ValidateCacheSalt(const std::string& cache_salt);
Status ValidateObjectKey(const ObjectKey& key);
// ValidateObjectKey of each key, in order, the first error returned. A
// batch's keys share their strings (one prompt's chunks of one model, salt
// and tags), so a key with the strings of the key checked before has only
// its numbers checked: a model name's check (its UTF-8 and characters) per
// key was 16 % of a 512-key read lock's time (bench/store_bench,
// BM_ReadLockUnlock).
Status ValidateObjectKeys(std::span<const ObjectKey> keys);
// The reference's rules: name and value at most 128 characters, the name not
// empty, neither holding '@', '%', '/', '\\' or NUL; at most kMaxTags tags.
Status ValidateTags(const std::map<std::string, std::string>& tags);
// ObjectKey::tags of a valid tag set.
std::string CanonicalTags(const std::map<std::string, std::string>& tags);
// OK when `tags` is ObjectKey::tags of a valid tag set (what CanonicalTags
// makes), else kInvalidKey: an L2 header is untrusted.
Status ValidateCanonicalTags(std::string_view tags);

// The reference's packing: (world_size << 24) | (rank << 16) | (world_size << 8) | rank,
// with local and global rank equal in MP mode. Fails unless 0 <= rank < world_size <= 255.
Result<std::int64_t> PackKvRank(std::int64_t world_size, std::int64_t worker_id);

// Deliberately not noexcept: libstdc++ then keeps each node's hash code in
// the node (std::__cache_default), so a bucket walk compares codes before it
// compares keys and never hashes a stored key again. With the codes left out
// every step of a walk rehashed the next node's key (its model name too) to
// find the bucket's end: at chunk size 1 that and the key compares were a
// third of a store's server time (docs/performance.md, "Chunk size 1").
struct ObjectKeyHash {
  std::size_t operator()(const ObjectKey& key) const;
};

// A total order on keys for listings that page (ObjectTable::ListResident,
// L2Index::List): by ObjectKeyHash, then field by field. A key's position
// depends on the key alone, so a walk of pages never skips or repeats a key
// that stays put while others come and go.
bool ListingLess(const ObjectKey& a, const ObjectKey& b);

// A listing's running selection: the `limit` first keys in ListingLess
// order after `after` (null: from the first) among those offered, in memory
// bounded by `limit` and each key hashed once. Offer keys while they stay
// valid (under the lock that guards them), then Take before they may not.
class ListingWindow {
 public:
  ListingWindow(const ObjectKey* after, std::size_t limit);
  // `payload` rides along (an index, a size): Take returns it with the key.
  void Offer(const ObjectKey& key, std::uint64_t payload);
  // The selection in order, copied out; the window is empty afterwards.
  std::vector<std::pair<ObjectKey, std::uint64_t>> Take();

 private:
  struct Ranked {
    std::size_t hash;
    const ObjectKey* key;
    std::uint64_t payload;
  };
  static bool Before(const Ranked& a, const Ranked& b);
  const ObjectKey* after_;
  std::size_t after_hash_ = 0;
  std::size_t limit_;
  std::vector<Ranked> heap_;  // a max-heap: the last of the selection on top
};

}  // namespace lmcache::store
