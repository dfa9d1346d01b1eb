#include "store/object_key.h"

#include <xxhash.h>

#include <tuple>

#include "common/utf8.h"

#include <cstring>
#include <algorithm>
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
  // A Python str on the reference's side; and it is shown as JSON text.
  if (!IsValidUtf8(model_name)) return Status(ErrorCode::kInvalidKey, "model_name is not UTF-8");
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
  if (!IsValidUtf8(cache_salt)) return Status(ErrorCode::kInvalidKey, "cache_salt is not UTF-8");
  return Status::Ok();
}

namespace {

// One tag by the reference's rules; the message is built only on failure.
Status ValidateTag(std::string_view name, std::string_view value) {
  if (name.empty()) return Status(ErrorCode::kInvalidKey, "a tag name must not be empty");
  constexpr std::string_view kRefused("@%/\\\0", 5);
  for (const bool is_value : {false, true}) {
    const std::string_view text = is_value ? value : name;
    const bool too_long = text.size() > kMaxTagLength;
    if (!too_long && text.find_first_of(kRefused) == std::string_view::npos) continue;
    const std::string what = is_value ? "the value of tag '" + std::string(name.substr(0, 32)) + "'"
                                      : "tag name '" + std::string(name.substr(0, 32)) + "'";
    return Status(ErrorCode::kInvalidKey,
                  too_long ? what + " is longer than " + std::to_string(kMaxTagLength) +
                                 " characters"
                           : what + " must not contain '@', '%', '/', '\\' or NUL");
  }
  return Status::Ok();
}

Status TooManyTags(std::size_t count) {
  return Status(ErrorCode::kInvalidKey, "a key names " + std::to_string(count) +
                                            " tags; at most " + std::to_string(kMaxTags));
}

}  // namespace

Status ValidateTags(const std::map<std::string, std::string>& tags) {
  if (tags.size() > kMaxTags) return TooManyTags(tags.size());
  for (const auto& [name, value] : tags) LMC_RETURN_IF_ERROR(ValidateTag(name, value));
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

Status ValidateCanonicalTags(std::string_view tags) {
  // Walked in place, without copies: the object table checks every key it is given.
  if (tags.empty()) return Status::Ok();  // no tags
  std::string_view previous_name;
  std::size_t count = 0;
  for (std::size_t begin = 0; begin <= tags.size();) {
    const std::size_t name_end = tags.find('%', begin);
    if (name_end == std::string_view::npos) {
      return Status(ErrorCode::kInvalidKey,
                    "tags '" + std::string(tags) + "' are not name%value pairs");
    }
    const std::size_t value_end = std::min(tags.find('%', name_end + 1), tags.size());
    const std::string_view name = tags.substr(begin, name_end - begin);
    LMC_RETURN_IF_ERROR(ValidateTag(name, tags.substr(name_end + 1, value_end - name_end - 1)));
    if (count > 0 && name <= previous_name) {
      return Status(ErrorCode::kInvalidKey, "tags '" + std::string(tags) + "' are not sorted");
    }
    if (++count > kMaxTags) return TooManyTags(count);
    previous_name = name;
    begin = value_end + 1;
  }
  return Status::Ok();
}

namespace {

Status ValidateKeyStrings(const ObjectKey& key) {
  LMC_RETURN_IF_ERROR(ValidateModelName(key.model_name));
  LMC_RETURN_IF_ERROR(ValidateCacheSalt(key.cache_salt));
  if (!key.tags.empty()) LMC_RETURN_IF_ERROR(ValidateCanonicalTags(key.tags));
  return Status::Ok();
}

Status ValidateKeyNumbers(const ObjectKey& key) {
  if (key.kv_rank < 0) return Status(ErrorCode::kInvalidKey, "kv_rank must not be negative");
  if (key.object_group_id < 0) {
    return Status(ErrorCode::kInvalidKey, "object_group_id must not be negative");
  }
  return Status::Ok();
}

bool SameStrings(const ObjectKey& a, const ObjectKey& b) {
  return a.model_name == b.model_name && a.cache_salt == b.cache_salt && a.tags == b.tags;
}

}  // namespace

Status ValidateObjectKey(const ObjectKey& key) {
  LMC_RETURN_IF_ERROR(ValidateKeyStrings(key));
  return ValidateKeyNumbers(key);
}

Status ValidateObjectKeys(std::span<const ObjectKey> keys) {
  const ObjectKey* checked = nullptr;  // the last key whose strings were checked
  for (const ObjectKey& key : keys) {
    if (checked == nullptr || !SameStrings(key, *checked)) {
      LMC_RETURN_IF_ERROR(ValidateKeyStrings(key));
      checked = &key;
    }
    LMC_RETURN_IF_ERROR(ValidateKeyNumbers(key));
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

namespace {

bool FieldsLess(const ObjectKey& a, const ObjectKey& b) {
  return std::tie(a.chunk_hash, a.model_name, a.kv_rank, a.object_group_id, a.cache_salt,
                  a.layout_namespace, a.tags) < std::tie(b.chunk_hash, b.model_name, b.kv_rank,
                                                         b.object_group_id, b.cache_salt,
                                                         b.layout_namespace, b.tags);
}

}  // namespace

bool ListingLess(const ObjectKey& a, const ObjectKey& b) {
  const std::size_t ha = ObjectKeyHash{}(a);
  const std::size_t hb = ObjectKeyHash{}(b);
  if (ha != hb) return ha < hb;
  return FieldsLess(a, b);
}

ListingWindow::ListingWindow(const ObjectKey* after, std::size_t limit)
    : after_(after), limit_(limit) {
  if (after_ != nullptr) after_hash_ = ObjectKeyHash{}(*after_);
  heap_.reserve(std::min<std::size_t>(limit_, 1 << 16));
}

bool ListingWindow::Before(const Ranked& a, const Ranked& b) {
  if (a.hash != b.hash) return a.hash < b.hash;
  return FieldsLess(*a.key, *b.key);
}

void ListingWindow::Offer(const ObjectKey& key, std::uint64_t payload) {
  if (limit_ == 0) return;
  const Ranked ranked{ObjectKeyHash{}(key), &key, payload};
  if (after_ != nullptr && !Before(Ranked{after_hash_, after_, 0}, ranked)) return;
  if (heap_.size() == limit_) {
    if (!Before(ranked, heap_.front())) return;  // after the whole selection
    std::pop_heap(heap_.begin(), heap_.end(), Before);
    heap_.back() = ranked;
  } else {
    heap_.push_back(ranked);
  }
  std::push_heap(heap_.begin(), heap_.end(), Before);
}

std::vector<std::pair<ObjectKey, std::uint64_t>> ListingWindow::Take() {
  std::sort_heap(heap_.begin(), heap_.end(), Before);
  std::vector<std::pair<ObjectKey, std::uint64_t>> out;
  out.reserve(heap_.size());
  for (const Ranked& r : heap_) out.emplace_back(*r.key, r.payload);
  heap_.clear();
  return out;
}

std::size_t ObjectKeyHash::operator()(const ObjectKey& key) const {
  // The chunk hash is already uniformly distributed; mix in the rest so keys of
  // one chunk on different ranks or models spread too. The strings go through
  // XXH3, each seeded with what came before: for a 32-character model name it
  // costs a third of std::hash's (a key is hashed for its shard, its map and
  // the LRU on every access).
  std::uint64_t h = 0;
  std::memcpy(&h, key.chunk_hash.data(), sizeof(h));
  auto mix = [&h](std::uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(static_cast<std::uint64_t>(key.kv_rank));
  mix(static_cast<std::uint64_t>(key.object_group_id));
  mix(key.layout_namespace);
  h = XXH3_64bits_withSeed(key.model_name.data(), key.model_name.size(), h);
  if (!key.cache_salt.empty())
    h = XXH3_64bits_withSeed(key.cache_salt.data(), key.cache_salt.size(), h);
  if (!key.tags.empty()) h = XXH3_64bits_withSeed(key.tags.data(), key.tags.size(), h);
  return static_cast<std::size_t>(h);
}

}  // namespace lmcache::store
