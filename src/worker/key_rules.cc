#include "worker/key_rules.h"

namespace lmcache::worker {

std::vector<std::int64_t> AllRanks(std::int64_t world_size) {
  std::vector<std::int64_t> ranks;
  for (std::int64_t w = 0; w < world_size; ++w) ranks.push_back(*store::PackKvRank(world_size, w));
  return ranks;
}

std::vector<store::ObjectKey> ExpandKeys(std::span<const store::ChunkHash> hashes,
                                         const std::string& model, const std::string& salt,
                                         const std::string& tags,
                                         std::span<const std::int64_t> kv_ranks,
                                         std::uint32_t layout) {
  std::vector<store::ObjectKey> keys;
  keys.reserve(hashes.size() * kv_ranks.size());
  for (const store::ChunkHash& hash : hashes) {
    for (const std::int64_t rank : kv_ranks) {
      keys.push_back({hash, model, rank, 0, salt, layout, tags});
    }
  }
  return keys;
}

std::string TenantOf(const IpcKey& key) {
  if (key.tags.empty()) return key.cache_salt;
  return key.cache_salt + "@" + store::CanonicalTags(key.tags);
}

Status CheckKeyRange(const IpcKey& key, std::int64_t chunk) {
  const auto tokens = static_cast<std::int64_t>(key.token_ids.size());
  if (key.start < 0 || key.end < key.start || key.end > tokens || key.start % chunk != 0 ||
      key.end % chunk != 0) {
    return InvalidArgument("key range [" + std::to_string(key.start) + ", " +
                           std::to_string(key.end) + ") must be chunk-aligned (chunk size " +
                           std::to_string(chunk) + ") and within the " + std::to_string(tokens) +
                           " tokens of the key");
  }
  LMC_RETURN_IF_ERROR(store::ValidateModelName(key.model_name));
  LMC_RETURN_IF_ERROR(store::ValidateCacheSalt(key.cache_salt));
  return store::ValidateTags(key.tags);
}

}  // namespace lmcache::worker
