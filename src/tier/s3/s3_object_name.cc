#include "tier/s3/s3_object_name.h"

#include <xxhash.h>

#include <charconv>
#include <cstdio>
#include <vector>

namespace lmcache::tier {
namespace {

std::string HashHex(const store::ChunkHash& hash) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(hash.size() * 2);
  for (const std::uint8_t b : hash) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // names are written in lower case only
}

std::optional<store::ChunkHash> ParseHash(std::string_view hex) {
  store::ChunkHash hash{};
  if (hex.size() != hash.size() * 2) return std::nullopt;
  for (std::size_t i = 0; i < hash.size(); ++i) {
    const int hi = HexDigit(hex[2 * i]);
    const int lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    hash[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return hash;
}

template <typename T>
std::optional<T> ParseNumber(std::string_view text, int base, std::size_t max_digits) {
  T value{};
  if (text.empty() || text.size() > max_digits) return std::nullopt;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string_view> Fields(std::string_view name) {
  std::vector<std::string_view> fields;
  std::size_t begin = 0;
  while (fields.size() < 8) {
    const std::size_t at = name.find('@', begin);
    fields.push_back(name.substr(begin, at == std::string_view::npos ? at : at - begin));
    if (at == std::string_view::npos) break;
    begin = at + 1;
  }
  return fields;
}

}  // namespace

std::string S3ObjectName(std::string_view prefix, const store::ObjectKey& key) {
  char rank[24];
  std::snprintf(rank, sizeof(rank), "%08llx",
                static_cast<unsigned long long>(static_cast<std::uint64_t>(key.kv_rank)));
  char group[16];
  std::snprintf(group, sizeof(group), "%x", static_cast<unsigned>(key.object_group_id));
  std::string name = std::string(prefix) + key.model_name + "@" + rank + "@" + group + "@" +
                     HashHex(key.chunk_hash);
  const bool ours = key.layout_namespace != 0 || !key.tags.empty();
  if (!key.cache_salt.empty() || ours) name += "@" + key.cache_salt;
  if (ours) name += "@L" + std::to_string(key.layout_namespace);
  if (!key.tags.empty()) name += "@T" + key.tags;
  if (name.size() <= kMaxS3ObjectName) return name;
  const XXH128_hash_t digest = XXH3_128bits(name.data(), name.size());
  char hex[40];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(digest.high64),
                static_cast<unsigned long long>(digest.low64));
  return std::string(prefix) + "h-" + hex;
}

std::optional<store::ObjectKey> ParseS3ObjectName(std::string_view prefix, std::string_view name) {
  if (!name.starts_with(prefix)) return std::nullopt;
  const std::vector<std::string_view> fields = Fields(name.substr(prefix.size()));
  if (fields.size() < 4 || fields.size() > 7) return std::nullopt;
  store::ObjectKey key;
  key.model_name = std::string(fields[0]);
  const auto rank = ParseNumber<std::uint64_t>(fields[1], 16, 16);
  const auto group = ParseNumber<std::uint32_t>(fields[2], 16, 8);
  const auto hash = ParseHash(fields[3]);
  if (!rank || !group || !hash || fields[1].size() < 8) return std::nullopt;
  key.kv_rank = static_cast<std::int64_t>(*rank);
  key.object_group_id = static_cast<std::int32_t>(*group);
  key.chunk_hash = *hash;
  if (fields.size() >= 5) key.cache_salt = std::string(fields[4]);
  if (fields.size() >= 6) {
    if (!fields[5].starts_with('L')) return std::nullopt;
    const auto ns = ParseNumber<std::uint32_t>(fields[5].substr(1), 10, 10);
    if (!ns) return std::nullopt;
    key.layout_namespace = *ns;
  }
  if (fields.size() == 7) {
    if (!fields[6].starts_with('T') || fields[6].size() == 1) return std::nullopt;
    key.tags = std::string(fields[6].substr(1));
  }
  if (!store::ValidateModelName(key.model_name).ok() ||
      !store::ValidateCacheSalt(key.cache_salt).ok() ||
      !store::ValidateCanonicalTags(key.tags).ok()) {
    return std::nullopt;
  }
  // Only the one name of its key: a name S3ObjectName would not write (an
  // empty salt field with nothing after it, upper-case hex) is another tool's.
  if (S3ObjectName(prefix, key) != name) return std::nullopt;
  return key;
}

}  // namespace lmcache::tier
