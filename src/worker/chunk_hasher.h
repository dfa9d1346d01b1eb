// ChunkHasher: the rolling chunk hashes of a prompt (token_hasher.h), with a
// bounded cache of (previous hash, chunk tokens) -> chunk hash shared by all
// requests.
//
// Every request names its range by the whole prompt, so the scheduler's
// lookup and each worker's stores and retrieves need the same hashes, and
// prompts that share a prefix (a system prompt) share their leading chunks.
// The cache answers those from memory: a hit costs a fast non-cryptographic
// hash of the chunk and a comparison of its tokens with each entry for them
// (one, or up to 8 after different prefixes), not a BLAKE3 pass. Keys
// are compared in full (the previous hash and every token), so a crafted
// collision of the fast hash costs a miss, never a wrong chunk hash. Entries
// are found by their tokens' fingerprint alone (XXH3 with a per-process
// seed), so all of a prompt's chunks are looked up at once, each shard
// locked once, their cache misses overlapping, before the chain of previous
// hashes picks the valid ones; one chunk's tokens after many prefixes keep
// at most 8 entries (each is compared on a lookup). The cache is capped in
// bytes and evicts least recently used entries; with a capacity of 0 every
// chunk is hashed afresh. Models of every chunk size
// share it: an entry's tokens are its chunk, of whatever length. Chunks of
// at most kUncachedChunkTokens tokens never use it: their BLAKE3 input (the
// previous hash and the tokens) is one 64-byte block, which costs less than a
// cache hit once the cache outgrows the CPU's caches (bench/codec_bench,
// BM_ChunkHasherPerChunk), and at chunk size 1 an entry per token would
// evict every longer chunk's entries.
//
// Thread-safety: internally synchronised (sharded mutexes, leaves in the lock
// order); Hashes may be called from any number of threads.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "worker/token_hasher.h"
#include "worker/worker_stats.h"

namespace lmcache::worker {

// 32 bytes of previous hash + 4 per token fill one BLAKE3 block at 8 tokens.
inline constexpr std::size_t kUncachedChunkTokens = 8;

class ChunkHasher {
 public:
  explicit ChunkHasher(std::size_t cache_bytes);
  ~ChunkHasher();
  ChunkHasher(const ChunkHasher&) = delete;
  ChunkHasher& operator=(const ChunkHasher&) = delete;

  // Hashes of chunks [0, count) of `chunk_size` tokens each of `tokens`,
  // which must hold at least count * chunk_size tokens.
  std::vector<ChunkHash> Hashes(std::span<const std::uint32_t> tokens, std::size_t chunk_size,
                                std::size_t count);
  ChunkHasherStats Stats() const;

 private:
  struct Shard;
  // A prompt's chunks' fingerprints and the cached entries whose tokens are
  // its chunks': all[k] is valid after `previous`; first[c] and each `next`
  // link chunk c's.
  struct Candidates {
    static constexpr std::uint32_t kNone = UINT32_MAX;
    struct Entry {
      ChunkHash previous{};
      ChunkHash hash{};
      std::uint32_t next = kNone;
    };
    std::vector<std::uint64_t> fingerprints;  // of chunk c's tokens
    std::vector<Entry> all;
    std::vector<std::uint32_t> first;
    std::vector<std::uint32_t> by_shard;  // chunk indices in shard order
    // fingerprint -> the first chunk of the call whose tokens have several entries
    std::unordered_map<std::uint64_t, std::uint32_t> repeated;

    // What the vectors and the map's buckets hold, kept between calls.
    std::size_t CapacityBytes() const;
  };
  // The fingerprints of the first `count` chunks of `tokens`, and every
  // cached entry for them; each shard's lock taken once per 64 chunks.
  void FindCandidates(std::span<const std::uint32_t> tokens, std::size_t chunk_size,
                      std::size_t count, Candidates* candidates);
  // Marks the entry (previous, tokens) used, if it is still cached.
  void Touch(std::uint64_t fingerprint, const ChunkHash& previous,
             std::span<const std::uint32_t> tokens);
  void Insert(std::uint64_t fingerprint, const ChunkHash& previous,
              std::span<const std::uint32_t> tokens, const ChunkHash& hash);

  const std::size_t cache_bytes_;
  std::unique_ptr<Shard[]> shards_;
  ChunkHasherCounters counters_;
};

}  // namespace lmcache::worker
