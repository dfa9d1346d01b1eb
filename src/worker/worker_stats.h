// The worker domain's figures, each declared once (stats/declare.h): the
// registry's counts and the chunk-hash cache (counted by
// ChunkHasherCounters); and why a registration ended, which the
// registrations ended are counted by.
//
// Thread-safety: plain values; the generated counter set is relaxed atomics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "stats/declare.h"

namespace lmcache::worker {

// Why a registration ended (every end is counted by its cause).
enum class ReleaseCause : std::uint8_t {
  kUnregistered,  // the worker unregistered
  kDisconnected,  // its connection closed (the worker died or went away)
  kReaped,        // silent past --worker-reap-timeout-seconds
  kReplaced,      // the same instance id registered from another connection
};
inline constexpr std::size_t kReleaseCauses = 4;

// RegistryCounts's figures, each declared once (stats/declare.h).
#define LMC_INSTANCE_STATS(X, D) \
  X(instances, "registered", std::uint64_t, kGauge, "instances", "instances", \
      "Registered worker instances.") \
  X(pending_writes, "pending_writes", std::uint64_t, kGauge, "calls", "pending_writes", \
      "prepare_store calls waiting for their commit.") \
  X(pending_reads, "pending_reads", std::uint64_t, kGauge, "calls", "pending_reads", \
      "prepare_retrieve calls waiting for their commit.")

struct RegistryCounts {
  LMC_STATS_MEMBERS(LMC_INSTANCE_STATS)
};
std::span<const stats::Row<RegistryCounts>> RegistryStatRows();

// ChunkHasherStats's figures, each declared once (stats/declare.h).
#define LMC_CHUNK_HASHER_STATS(X, D) \
  X(hits, "hash_cache_hits", std::uint64_t, kCounter, "hashes", "hash_cache_hits_total", \
      "Chunk hashes answered by the hash cache.") \
  X(misses, "hash_cache_misses", std::uint64_t, kCounter, "hashes", \
      "hash_cache_misses_total", "Chunk hashes computed.") \
  X(entries, "hash_cache_entries", std::uint64_t, kGauge, "entries", "hash_cache_entries", \
      "Token prefixes the hash cache holds.") \
  X(bytes, "hash_cache_bytes", std::uint64_t, kGauge, "bytes", "hash_cache_bytes", \
      "Memory the hash cache holds.")

struct ChunkHasherStats {
  LMC_STATS_MEMBERS(LMC_CHUNK_HASHER_STATS)
  std::uint64_t capacity_bytes = 0;
};
std::span<const stats::Row<ChunkHasherStats>> ChunkHasherStatRows();
LMC_STATS_COUNTED(ChunkHasherCounters, ChunkHasherStats, LMC_CHUNK_HASHER_STATS);

}  // namespace lmcache::worker
