#include "common/blake3.h"

namespace lmcache {

Blake3Digest Blake3(std::span<const std::uint8_t> data) {
  Blake3Hasher hasher;
  hasher.Update(data);
  return hasher.Finalize();
}

std::string ToHex(const Blake3Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(digest.size() * 2);
  for (const std::uint8_t byte : digest) {
    out += kHex[byte >> 4];
    out += kHex[byte & 0xf];
  }
  return out;
}

}  // namespace lmcache
