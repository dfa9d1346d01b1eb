// The rules of a worker's keys: which key ranges are valid, which tenant a
// key belongs to, and the object keys of a prompt's chunks on every rank.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lmcache/messages.h"
#include "lmcache/status.h"
#include "protocol/wire_codec.h"
#include "store/object_key.h"

namespace lmcache::worker {

// The key's range must be chunk-aligned and inside its tokens, its model
// name, cache salt and request tags valid.
Status CheckKeyRange(const IpcKey& key, std::int64_t chunk_size);

// What a session tells its lookups apart by: the cache salt, and the request
// tags after an '@' (which no salt holds) when there are any.
std::string TenantOf(const IpcKey& key);

// Object keys of chunks [0, hashes.size()) for every rank in `kv_ranks`,
// chunk-major and rank-minor (spec 5.5), in the layout namespace `layout`;
// `tags` canonical (store::CanonicalTags).
std::vector<store::ObjectKey> ExpandKeys(std::span<const store::ChunkHash> hashes,
                                         const std::string& model, const std::string& salt,
                                         const std::string& tags,
                                         std::span<const std::int64_t> kv_ranks,
                                         std::uint32_t layout);

// kv_rank of every worker of a world.
std::vector<std::int64_t> AllRanks(std::int64_t world_size);

}  // namespace lmcache::worker
