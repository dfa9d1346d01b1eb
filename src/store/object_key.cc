#include "store/object_key.h"

#include <cstring>
#include <functional>

namespace lmcache::store {

std::string ObjectKey::DebugString() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 6; ++i) {
    out += kHex[chunk_hash[i] >> 4];
    out += kHex[chunk_hash[i] & 0xf];
  }
  out += "..@" + model_name + "@rank" + std::to_string(kv_rank) + "@g" +
         std::to_string(object_group_id);
  if (!cache_salt.empty()) out += "@salt:" + cache_salt;
  if (layout_namespace != 0) out += "@layout:" + std::to_string(layout_namespace);
  return out;
}

Status ValidateModelName(const std::string& model_name) {
  if (model_name.empty()) return Status(ErrorCode::kInvalidKey, "model_name must not be empty");
  if (model_name.size() > kMaxModelNameLength) {
    return Status(ErrorCode::kInvalidKey,
                  "model_name is longer than " + std::to_string(kMaxModelNameLength) + " bytes");
  }
  if (model_name.find('@') != std::string::npos || model_name.find('\0') != std::string::npos) {
    return Status(ErrorCode::kInvalidKey, "model_name must not contain '@' or NUL");
  }
  return Status::Ok();
}

Status ValidateCacheSalt(const std::string& cache_salt) {
  if (cache_salt.size() > kMaxCacheSaltLength) {
    return Status(ErrorCode::kInvalidKey, "cache_salt is longer than " +
                                              std::to_string(kMaxCacheSaltLength) + " characters");
  }
  if (cache_salt.find_first_of(std::string("@/\\\0", 4)) != std::string::npos) {
    return Status(ErrorCode::kInvalidKey, "cache_salt must not contain '@', '/', '\\' or NUL");
  }
  return Status::Ok();
}

Status ValidateObjectKey(const ObjectKey& key) {
  LMC_RETURN_IF_ERROR(ValidateModelName(key.model_name));
  LMC_RETURN_IF_ERROR(ValidateCacheSalt(key.cache_salt));
  if (key.kv_rank < 0) return Status(ErrorCode::kInvalidKey, "kv_rank must not be negative");
  if (key.object_group_id < 0) {
    return Status(ErrorCode::kInvalidKey, "object_group_id must not be negative");
  }
  return Status::Ok();
}

Result<std::int64_t> PackKvRank(std::int64_t world_size, std::int64_t worker_id) {
  if (world_size < 1 || world_size > 255) {
    return Status(ErrorCode::kInvalidKey,
                  "world_size must be in [1, 255], got " + std::to_string(world_size));
  }
  if (worker_id < 0 || worker_id >= world_size) {
    return Status(ErrorCode::kInvalidKey,
                  "worker_id must be in [0, world_size), got " + std::to_string(worker_id));
  }
  return (world_size << 24) | (worker_id << 16) | (world_size << 8) | worker_id;
}

std::size_t ObjectKeyHash::operator()(const ObjectKey& key) const noexcept {
  // The chunk hash is already uniformly distributed; mix in the rest so keys of
  // one chunk on different ranks or models spread too.
  std::uint64_t h = 0;
  std::memcpy(&h, key.chunk_hash.data(), sizeof(h));
  auto mix = [&h](std::uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(static_cast<std::uint64_t>(key.kv_rank));
  mix(static_cast<std::uint64_t>(key.object_group_id));
  mix(key.layout_namespace);
  mix(std::hash<std::string>{}(key.model_name));
  if (!key.cache_salt.empty()) mix(std::hash<std::string>{}(key.cache_salt));
  return static_cast<std::size_t>(h);
}

}  // namespace lmcache::store
