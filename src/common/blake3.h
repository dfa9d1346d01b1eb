// BLAKE3-256: the default (unkeyed) BLAKE3 hash with a 32-byte digest, implemented from the
// public specification (no vendored code; checked against the b3sum tool in the tests).
//
// Used for the reference-compatible chunk hash: LMCache names KV chunks by BLAKE3 digests of
// their token ids, so the server must produce bit-identical digests. It is a portable scalar
// implementation (no SIMD, no multithreading): a 128K-token prompt is ~512 KiB per lookup,
// which one core of our 2.25 GHz VMs hashes in about 1.3 ms (~5 cycles per byte).
// Thread-safety: a Blake3Hasher is a plain value: not synchronised; distinct hashers may be used
// concurrently. The free functions are reentrant.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace lmcache {

using Blake3Digest = std::array<std::uint8_t, 32>;

// Incremental hasher: Update() any number of times with any split of the input, then
// Finalize(). The digest depends only on the concatenated input, never on how it was split.
class Blake3Hasher {
 public:
  Blake3Hasher();

  void Update(std::span<const std::uint8_t> data);
  void Update(const void* data, std::size_t size);

  // Finalize does not modify the state: more Update() calls may follow, and a later
  // Finalize() covers everything fed so far.
  Blake3Digest Finalize() const;

  // Back to the empty-input state, as if freshly constructed.
  void Reset();

 private:
  using Cv = std::array<std::uint32_t, 8>;  // a chaining value

  static constexpr std::size_t kBlockLen = 64;
  static constexpr std::size_t kChunkLen = 1024;
  // Chunk counters are 64-bit and a chunk is 2^10 bytes, so at most 2^54 chunks; the lazy-merge
  // stack holds one CV per set bit of the chunk count.
  static constexpr std::size_t kMaxStackDepth = 54;

  std::size_t ChunkBytes() const { return blocks_compressed_ * kBlockLen + block_len_; }
  // Compresses the block at `block` (kBlockLen bytes) into chunk_cv_ as a non-final block.
  void CompressChunkBlock(const std::uint8_t* block);
  // Finishes the current (full) chunk, pushes its CV onto the tree and starts the next chunk.
  void FinishChunk();
  // Pushes a completed chunk's CV; `total_chunks` counts it. Merges the subtrees it completes.
  void PushChunkCv(Cv cv, std::uint64_t total_chunks);

  Cv chunk_cv_;                    // CV of the current chunk after blocks_compressed_ blocks
  std::uint64_t chunk_counter_;    // index of the current chunk
  std::size_t blocks_compressed_;  // full blocks of the current chunk already compressed
  // The not-yet-compressed tail of the current chunk. Kept back even when full, because whether
  // it is the last block (CHUNK_END, maybe ROOT) is only known when more input arrives.
  std::array<std::uint8_t, kBlockLen> block_;
  std::size_t block_len_;
  std::array<Cv, kMaxStackDepth> cv_stack_;  // roots of completed subtrees, left to right
  std::size_t cv_stack_len_;
};

// One-shot digest of `data`.
Blake3Digest Blake3(std::span<const std::uint8_t> data);

// Lowercase hex, 64 characters (the format b3sum prints).
std::string ToHex(const Blake3Digest& digest);

}  // namespace lmcache
