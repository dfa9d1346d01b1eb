#include "tier/fs/fs_key_codec.h"

#include <xxhash.h>

#include <cstdio>
#include <regex>

namespace lmcache::tier {
namespace {

constexpr std::size_t kMaxFileName = 255;

std::string Hex(const void* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 0xf];
  }
  return out;
}

}  // namespace

std::string ObjectFileName(const store::ObjectKey& key) {
  std::string name;
  for (const char c : key.model_name) {
    if (c == '/') {
      name += "-SEP-";
    } else {
      name += c;
    }
  }
  char rank[32];
  std::snprintf(rank, sizeof(rank), "@0x%08llx@%x@",
                static_cast<unsigned long long>(static_cast<std::uint64_t>(key.kv_rank)),
                static_cast<unsigned>(key.object_group_id));
  name += rank;
  name += Hex(key.chunk_hash.data(), key.chunk_hash.size());
  if (!key.cache_salt.empty()) {
    name += '@';
    name += key.cache_salt;
  }
  if (key.layout_namespace != 0) name += "@L" + std::to_string(key.layout_namespace);
  // "@@": no other field is empty or holds an '@', so no salt can end up
  // looking like tags. '%' separates the tags' names and values; '/' is
  // refused in both.
  if (!key.tags.empty()) name += "@@T" + key.tags;
  name += kObjectFileSuffix;
  if (name.size() <= kMaxFileName) return name;
  const XXH128_hash_t digest = XXH3_128bits(name.data(), name.size());
  return "h-" + Hex(&digest.high64, 8) + Hex(&digest.low64, 8) + std::string(kObjectFileSuffix);
}

bool IsObjectFileName(std::string_view name) {
  // <model>@0x<rank, 8 to 16 hex>@<group, hex>@<hash, 64 hex>[@...].data, or
  // h-<32 hex>.data; never a path.
  static const std::regex kLong(R"(h-[0-9a-f]{32}\.data)");
  static const std::regex kKeyed(R"([^/]*@0x[0-9a-f]{8,16}@[0-9a-f]{1,8}@[0-9a-f]{64}(@[^/]*)?\.data)");
  if (name.size() > kMaxFileName || name.find('/') != std::string_view::npos) return false;
  return std::regex_match(name.begin(), name.end(), kLong) ||
         std::regex_match(name.begin(), name.end(), kKeyed);
}

std::string TemporaryFileName(long pid, std::uint64_t n) {
  return std::to_string(pid) + "-" + std::to_string(n) + ".tmp";
}

bool IsTemporaryFileName(std::string_view name) {
  static const std::regex kTemporary(R"([0-9]{1,10}-[0-9]{1,20}\.tmp)");
  return std::regex_match(name.begin(), name.end(), kTemporary);
}

}  // namespace lmcache::tier
