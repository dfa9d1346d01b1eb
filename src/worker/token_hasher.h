// Chunk hashing bit-exact with the reference (spec 5.2).
//
// A prompt is cut into full chunks of `chunk_size` tokens (a trailing partial
// chunk is never hashed). The hash of chunk i is a rolling prefix hash:
//   h_0 = NONE_HASH = BLAKE3(12 zero bytes)          (the reference's H(int 0, [0]))
//   h_i = BLAKE3(h_{i-1} || tokens of chunk i as 4-byte big-endian unsigned)
// so a chunk's identity is its content and everything before it.
// Thread-safety: stateless functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "store/object_key.h"

namespace lmcache::worker {

using store::ChunkHash;

const ChunkHash& NoneHash();

ChunkHash HashChunk(const ChunkHash& prefix, std::span<const std::uint32_t> tokens);

// Hashes of chunks [first_chunk, first_chunk + count) given the hash of the
// chunk before `first_chunk` (NoneHash() when it is 0). The tokens must cover them.
std::vector<ChunkHash> HashChunks(std::span<const std::uint32_t> tokens, std::size_t chunk_size,
                                  std::size_t first_chunk, std::size_t count,
                                  const ChunkHash& prefix);

}  // namespace lmcache::worker
