#include "store/object_key.h"

#include <cstring>
#include <functional>
#include <vector>

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
  if (!tags.empty()) out += "@tags:" + tags;
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

namespace {

Status ValidateTagText(std::string_view what, std::string_view text) {
  if (text.size() > kMaxTagLength) {
    return Status(ErrorCode::kInvalidKey, std::string(what) + " is longer than " +
                                              std::to_string(kMaxTagLength) + " characters");
  }
  if (text.find_first_of(std::string_view("@%/\\\0", 5)) != std::string_view::npos) {
    return Status(ErrorCode::kInvalidKey,
                  std::string(what) + " must not contain '@', '%', '/', '\\' or NUL");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTags(const std::map<std::string, std::string>& tags) {
  if (tags.size() > kMaxTags) {
    return Status(ErrorCode::kInvalidKey, "a key names " + std::to_string(tags.size()) +
                                              " tags; at most " + std::to_string(kMaxTags));
  }
  for (const auto& [name, value] : tags) {
    if (name.empty()) return Status(ErrorCode::kInvalidKey, "a tag name must not be empty");
    LMC_RETURN_IF_ERROR(ValidateTagText("tag name '" + name.substr(0, 32) + "'", name));
    LMC_RETURN_IF_ERROR(ValidateTagText("the value of tag '" + name + "'", value));
  }
  return Status::Ok();
}

std::string CanonicalTags(const std::map<std::string, std::string>& tags) {
  std::string out;
  for (const auto& [name, value] : tags) {  // std::map: sorted by name
    if (!out.empty()) out += '%';
    out += name;
    out += '%';
    out += value;
  }
  return out;
}

Result<std::map<std::string, std::string>> ParseCanonicalTags(std::string_view tags) {
  std::map<std::string, std::string> out;
  if (tags.empty()) return out;
  std::vector<std::string_view> parts;
  for (std::size_t begin = 0;;) {
    const std::size_t end = tags.find('%', begin);
    parts.push_back(tags.substr(begin, end == std::string_view::npos ? end : end - begin));
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  if (parts.size() % 2 != 0) {
    return Status(ErrorCode::kInvalidKey, "tags '" + std::string(tags) + "' are not name%value pairs");
  }
  for (std::size_t i = 0; i < parts.size(); i += 2) {
    if (!out.empty() && std::string(parts[i]) <= out.rbegin()->first) {
      return Status(ErrorCode::kInvalidKey, "tags '" + std::string(tags) + "' are not sorted");
    }
    out.emplace(std::string(parts[i]), std::string(parts[i + 1]));
  }
  LMC_RETURN_IF_ERROR(ValidateTags(out));
  return out;
}

Status ValidateObjectKey(const ObjectKey& key) {
  LMC_RETURN_IF_ERROR(ValidateModelName(key.model_name));
  LMC_RETURN_IF_ERROR(ValidateCacheSalt(key.cache_salt));
  LMC_RETURN_IF_ERROR(ParseCanonicalTags(key.tags).status());
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
  if (!key.tags.empty()) mix(std::hash<std::string>{}(key.tags));
  return static_cast<std::size_t>(h);
}

}  // namespace lmcache::store
