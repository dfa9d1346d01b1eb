#include "worker/token_hasher.h"

#include <array>

#include "common/blake3.h"

namespace lmcache::worker {

const ChunkHash& NoneHash() {
  static const ChunkHash kNone = [] {
    const std::array<std::uint8_t, 12> zeros{};
    return Blake3(zeros);
  }();
  return kNone;
}

ChunkHash HashChunk(const ChunkHash& prefix, std::span<const std::uint32_t> tokens) {
  Blake3Hasher hasher;
  hasher.Update(prefix.data(), prefix.size());
  // Big-endian 4-byte tokens, converted in blocks so the hasher sees large updates.
  std::array<std::uint8_t, 1024> block;
  std::size_t used = 0;
  for (const std::uint32_t token : tokens) {
    block[used++] = static_cast<std::uint8_t>(token >> 24);
    block[used++] = static_cast<std::uint8_t>(token >> 16);
    block[used++] = static_cast<std::uint8_t>(token >> 8);
    block[used++] = static_cast<std::uint8_t>(token);
    if (used == block.size()) {
      hasher.Update(block.data(), used);
      used = 0;
    }
  }
  if (used > 0) hasher.Update(block.data(), used);
  return hasher.Finalize();
}

std::vector<ChunkHash> HashChunks(std::span<const std::uint32_t> tokens, std::size_t chunk_size,
                                  std::size_t first_chunk, std::size_t count,
                                  const ChunkHash& prefix) {
  std::vector<ChunkHash> hashes;
  hashes.reserve(count);
  ChunkHash previous = prefix;
  for (std::size_t c = first_chunk; c < first_chunk + count; ++c) {
    previous = HashChunk(previous, tokens.subspan(c * chunk_size, chunk_size));
    hashes.push_back(previous);
  }
  return hashes;
}

}  // namespace lmcache::worker
