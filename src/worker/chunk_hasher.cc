#include "worker/chunk_hasher.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <random>

#include "common/check.h"

namespace lmcache::worker {

// A cached chunk. Not in the anonymous namespace: ChunkHasher::Shard, which
// has external linkage, holds a list of them.
namespace chunk_hasher_internal {
struct Entry {
  std::uint64_t fingerprint = 0;
  ChunkHash previous{};
  ChunkHash hash{};
  std::vector<std::uint32_t> tokens;
  std::uint64_t used = 0;  // the shard's use count at its last hit or insert
  std::size_t Bytes() const { return sizeof(Entry) + tokens.capacity() * 4 + 64; }
  bool HasTokens(std::span<const std::uint32_t> chunk) const {
    return tokens.size() == chunk.size() &&
           std::memcmp(tokens.data(), chunk.data(), chunk.size_bytes()) == 0;
  }
};
}  // namespace chunk_hasher_internal
using chunk_hasher_internal::Entry;

namespace {

constexpr std::size_t kShards = 16;
// Entries whose chunks' tokens share a fingerprint: the same chunk after
// different prefixes (or a crafted XXH3 collision). A lookup compares each,
// so a fingerprint holds at most this many; a newer one evicts the least
// recently used of them.
constexpr std::size_t kEntriesPerFingerprint = 8;
// Chunks looked up per hold of a shard's lock.
constexpr std::uint32_t kChunksPerLock = 64;
// A thread keeps its lookup's scratch up to this size for its next one.
constexpr std::size_t kScratchBytes = 4u << 20;

// The fingerprint of a chunk's tokens alone, so that a prompt's chunks are
// all looked up at once, before their chain of hashes is known; seeded per
// process, so that colliding chunks cannot be prepared in advance.
std::uint64_t Fingerprint(std::span<const std::uint32_t> tokens) {
  static const std::uint64_t seed =
      std::random_device{}() * 0x9e3779b97f4a7c15ull ^ std::random_device{}();
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), seed);
}

}  // namespace

struct ChunkHasher::Shard {
  Mutex mu;
  std::list<Entry> lru LMC_GUARDED_BY(mu);  // front = least recently used
  std::unordered_multimap<std::uint64_t, std::list<Entry>::iterator> index LMC_GUARDED_BY(mu);
  std::size_t bytes LMC_GUARDED_BY(mu) = 0;
  std::uint64_t uses LMC_GUARDED_BY(mu) = 0;

  // FindCandidates' step for chunk `c`.
  void FindChunkLocked(std::span<const std::uint32_t> tokens, std::size_t chunk_size,
                       std::uint32_t c, std::uint64_t fingerprint, Candidates* candidates)
      LMC_REQUIRES(mu);

  void EraseLocked(std::unordered_multimap<std::uint64_t, std::list<Entry>::iterator>::iterator it)
      LMC_REQUIRES(mu) {
    bytes -= it->second->Bytes();
    lru.erase(it->second);
    index.erase(it);
  }
};

ChunkHasher::ChunkHasher(std::size_t cache_bytes)
    : cache_bytes_(cache_bytes), shards_(new Shard[kShards]) {}

ChunkHasher::~ChunkHasher() = default;

std::size_t ChunkHasher::Candidates::CapacityBytes() const {
  return fingerprints.capacity() * sizeof(std::uint64_t) + all.capacity() * sizeof(Entry) +
         (first.capacity() + by_shard.capacity()) * sizeof(std::uint32_t) +
         repeated.bucket_count() * sizeof(void*);
}

void ChunkHasher::FindCandidates(std::span<const std::uint32_t> tokens, std::size_t chunk_size,
                                 std::size_t count, Candidates* candidates) {
  std::vector<std::uint64_t>& fingerprints = candidates->fingerprints;
  fingerprints.resize(count);
  for (std::size_t c = 0; c < count; ++c) {
    fingerprints[c] = Fingerprint(tokens.subspan(c * chunk_size, chunk_size));
  }
  // Chunks in shard order (a counting sort), so that each shard is locked
  // once; within one, no lookup waits on another's, and their cache misses
  // overlap.
  std::array<std::uint32_t, kShards + 1> shard_start{};
  for (const std::uint64_t f : fingerprints) ++shard_start[f % kShards + 1];
  for (std::size_t s = 0; s < kShards; ++s) shard_start[s + 1] += shard_start[s];
  std::vector<std::uint32_t>& by_shard = candidates->by_shard;
  by_shard.resize(count);
  std::array<std::uint32_t, kShards> next_slot{};
  std::copy_n(shard_start.begin(), kShards, next_slot.begin());
  for (std::size_t c = 0; c < count; ++c)
    by_shard[next_slot[fingerprints[c] % kShards]++] = static_cast<std::uint32_t>(c);
  candidates->first.assign(count, Candidates::kNone);
  candidates->repeated.clear();
  for (std::size_t s = 0; s < kShards; ++s) {
    // The lock is taken again every kChunksPerLock chunks: a long prompt's
    // lookup never holds a shard from every other request for long.
    for (std::uint32_t from = shard_start[s]; from < shard_start[s + 1]; from += kChunksPerLock) {
      const std::uint32_t to = std::min<std::uint32_t>(from + kChunksPerLock, shard_start[s + 1]);
      MutexLock lock(&shards_[s].mu);
      for (std::uint32_t i = from; i < to; ++i) {
        shards_[s].FindChunkLocked(tokens, chunk_size, by_shard[i], fingerprints[by_shard[i]],
                                   candidates);
      }
    }
  }
}

void ChunkHasher::Shard::FindChunkLocked(std::span<const std::uint32_t> tokens,
                                         std::size_t chunk_size, std::uint32_t c,
                                         std::uint64_t fingerprint, Candidates* candidates) {
  const std::span<const std::uint32_t> chunk = tokens.subspan(c * chunk_size, chunk_size);
  // A chunk repeated in the prompt whose tokens have several entries shares
  // the first occurrence's list: a prompt of one chunk repeated costs one
  // list, not one per occurrence.
  if (!candidates->repeated.empty()) {
    if (auto earlier = candidates->repeated.find(fingerprint);
        earlier != candidates->repeated.end() &&
        std::memcmp(tokens.data() + earlier->second * chunk_size, chunk.data(),
                    chunk.size_bytes()) == 0) {
      candidates->first[c] = candidates->first[earlier->second];
      return;
    }
  }
  auto [it, last] = index.equal_range(fingerprint);
  std::size_t found = 0;
  std::list<Entry>::iterator sole;
  for (; it != last; ++it) {
    const Entry& entry = *it->second;
    if (!entry.HasTokens(chunk)) continue;  // another chunk with the same fingerprint
    candidates->all.push_back({entry.previous, entry.hash, candidates->first[c]});
    candidates->first[c] = static_cast<std::uint32_t>(candidates->all.size() - 1);
    sole = it->second;
    ++found;
  }
  // Which of several entries is used is known once the chain is: Hashes
  // touches the chosen one then.
  if (found == 1) {
    sole->used = ++uses;
    lru.splice(lru.end(), lru, sole);
  } else if (found > 1) {
    candidates->repeated.emplace(fingerprint, c);
  }
}

void ChunkHasher::Touch(std::uint64_t fingerprint, const ChunkHash& previous,
                        std::span<const std::uint32_t> tokens) {
  Shard& shard = shards_[fingerprint % kShards];
  MutexLock lock(&shard.mu);
  auto [it, last] = shard.index.equal_range(fingerprint);
  for (; it != last; ++it) {
    Entry& entry = *it->second;
    if (entry.previous == previous && entry.HasTokens(tokens)) {
      entry.used = ++shard.uses;
      shard.lru.splice(shard.lru.end(), shard.lru, it->second);
      return;
    }
  }
}

void ChunkHasher::Insert(std::uint64_t fingerprint, const ChunkHash& previous,
                         std::span<const std::uint32_t> tokens, const ChunkHash& hash) {
  Shard& shard = shards_[fingerprint % kShards];
  Entry entry{fingerprint, previous, hash, {tokens.begin(), tokens.end()}};
  const std::size_t budget = cache_bytes_ / kShards;
  if (entry.Bytes() > budget) return;
  MutexLock lock(&shard.mu);
  auto [it, last] = shard.index.equal_range(fingerprint);
  std::size_t same_fingerprint = 0;
  auto least_used = shard.index.end();
  for (; it != last; ++it) {
    const Entry& held = *it->second;
    if (held.previous == previous && held.HasTokens(tokens)) return;  // a racing insert
    ++same_fingerprint;
    if (least_used == shard.index.end() || held.used < least_used->second->used) least_used = it;
  }
  if (same_fingerprint >= kEntriesPerFingerprint) shard.EraseLocked(least_used);
  while (shard.bytes + entry.Bytes() > budget && !shard.lru.empty()) {
    auto [first, end] = shard.index.equal_range(shard.lru.front().fingerprint);
    while (first != end && first->second != shard.lru.begin()) ++first;
    LMC_CHECK(first != end);  // every entry is indexed
    shard.EraseLocked(first);
  }
  entry.used = ++shard.uses;
  shard.bytes += entry.Bytes();
  shard.lru.push_back(std::move(entry));
  shard.index.emplace(fingerprint, std::prev(shard.lru.end()));
}

std::vector<ChunkHash> ChunkHasher::Hashes(std::span<const std::uint32_t> tokens,
                                           std::size_t chunk_size, std::size_t count) {
  std::vector<ChunkHash> hashes;
  hashes.reserve(count);
  ChunkHash previous = NoneHash();
  const bool cached = cache_bytes_ > 0 && chunk_size > kUncachedChunkTokens;
  // Reused by the thread's next call: a prompt's lookup allocates nothing
  // that the next would fault in again (kept up to kScratchBytes).
  thread_local Candidates candidates;
  candidates.all.clear();
  if (cached) FindCandidates(tokens, chunk_size, count, &candidates);
  const std::vector<std::uint64_t>& fingerprints = candidates.fingerprints;
  // The chain: a chunk's cached hash counts only after the same previous
  // hash (its tokens were compared in full above).
  std::uint64_t hits = 0;
  for (std::size_t c = 0; c < count; ++c) {
    std::optional<ChunkHash> found;
    const std::uint32_t first = cached ? candidates.first[c] : Candidates::kNone;
    for (std::uint32_t k = first; k != Candidates::kNone; k = candidates.all[k].next) {
      if (candidates.all[k].previous == previous) {
        found = candidates.all[k].hash;
        // One of several entries: the one used is known now.
        if (candidates.all[first].next != Candidates::kNone) {
          Touch(fingerprints[c], previous, tokens.subspan(c * chunk_size, chunk_size));
        }
        break;
      }
    }
    ChunkHash hash;
    if (found) {
      hash = *found;
      hits += 1;
    } else {
      const std::span<const std::uint32_t> chunk = tokens.subspan(c * chunk_size, chunk_size);
      hash = HashChunk(previous, chunk);
      if (cached) Insert(fingerprints[c], previous, chunk, hash);
    }
    hashes.push_back(hash);
    previous = hash;
  }
  if (candidates.CapacityBytes() > kScratchBytes) candidates = Candidates{};
  counters_.hits.fetch_add(hits, std::memory_order_relaxed);
  counters_.misses.fetch_add(count - hits, std::memory_order_relaxed);
  return hashes;
}

ChunkHasherStats ChunkHasher::Stats() const {
  ChunkHasherStats stats;
  counters_.CopyTo(&stats);
  stats.capacity_bytes = cache_bytes_;
  for (std::size_t s = 0; s < kShards; ++s) {
    MutexLock lock(&shards_[s].mu);
    stats.entries += shards_[s].index.size();
    stats.bytes += shards_[s].bytes;
  }
  return stats;
}

LMC_STATS_ROWS(ChunkHasherStatRows, ChunkHasherStats, LMC_CHUNK_HASHER_STATS)

}  // namespace lmcache::worker
