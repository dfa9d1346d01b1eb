#include "worker/chunk_hasher.h"

#include <xxhash.h>

#include <cstring>

namespace lmcache::worker {
namespace {

constexpr std::size_t kShards = 16;

struct Entry {
  std::uint64_t fingerprint = 0;
  ChunkHash previous{};
  ChunkHash hash{};
  std::vector<std::uint32_t> tokens;
  std::size_t Bytes() const { return sizeof(Entry) + tokens.capacity() * 4 + 64; }
};

std::uint64_t Fingerprint(const ChunkHash& previous, std::span<const std::uint32_t> tokens) {
  std::uint64_t seed = 0;
  std::memcpy(&seed, previous.data(), sizeof(seed));
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), seed);
}

}  // namespace

struct ChunkHasher::Shard {
  Mutex mu;
  std::list<Entry> lru LMC_GUARDED_BY(mu);  // front = least recently used
  std::unordered_map<std::uint64_t, std::list<Entry>::iterator> index LMC_GUARDED_BY(mu);
  std::size_t bytes LMC_GUARDED_BY(mu) = 0;
};

ChunkHasher::ChunkHasher(std::size_t cache_bytes)
    : cache_bytes_(cache_bytes), shards_(new Shard[kShards]) {}

ChunkHasher::~ChunkHasher() = default;

bool ChunkHasher::Find(std::uint64_t fingerprint, const ChunkHash& previous,
                       std::span<const std::uint32_t> tokens, ChunkHash* out) {
  Shard& shard = shards_[fingerprint % kShards];
  MutexLock lock(&shard.mu);
  auto it = shard.index.find(fingerprint);
  if (it == shard.index.end()) return false;
  const Entry& entry = *it->second;
  if (entry.previous != previous || entry.tokens.size() != tokens.size() ||
      std::memcmp(entry.tokens.data(), tokens.data(), tokens.size_bytes()) != 0) {
    return false;  // another chunk with the same fingerprint
  }
  *out = entry.hash;
  shard.lru.splice(shard.lru.end(), shard.lru, it->second);
  return true;
}

void ChunkHasher::Insert(std::uint64_t fingerprint, const ChunkHash& previous,
                         std::span<const std::uint32_t> tokens, const ChunkHash& hash) {
  Shard& shard = shards_[fingerprint % kShards];
  Entry entry{fingerprint, previous, hash, {tokens.begin(), tokens.end()}};
  const std::size_t budget = cache_bytes_ / kShards;
  if (entry.Bytes() > budget) return;
  MutexLock lock(&shard.mu);
  if (auto it = shard.index.find(fingerprint); it != shard.index.end()) {
    shard.bytes -= it->second->Bytes();  // a colliding entry makes way: the newest wins
    shard.lru.erase(it->second);
    shard.index.erase(it);
  }
  while (shard.bytes + entry.Bytes() > budget && !shard.lru.empty()) {
    shard.bytes -= shard.lru.front().Bytes();
    shard.index.erase(shard.lru.front().fingerprint);
    shard.lru.pop_front();
  }
  shard.bytes += entry.Bytes();
  shard.lru.push_back(std::move(entry));
  shard.index.emplace(fingerprint, std::prev(shard.lru.end()));
}

std::vector<ChunkHash> ChunkHasher::Hashes(std::span<const std::uint32_t> tokens,
                                           std::size_t chunk_size, std::size_t count) {
  std::vector<ChunkHash> hashes;
  hashes.reserve(count);
  ChunkHash previous = NoneHash();
  std::uint64_t hits = 0;
  const bool cached = cache_bytes_ > 0 && chunk_size > kUncachedChunkTokens;
  for (std::size_t c = 0; c < count; ++c) {
    const std::span<const std::uint32_t> chunk = tokens.subspan(c * chunk_size, chunk_size);
    const std::uint64_t fingerprint = cached ? Fingerprint(previous, chunk) : 0;
    ChunkHash hash;
    if (cached && Find(fingerprint, previous, chunk, &hash)) {
      hits += 1;
    } else {
      hash = HashChunk(previous, chunk);
      if (cached) Insert(fingerprint, previous, chunk, hash);
    }
    hashes.push_back(hash);
    previous = hash;
  }
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
