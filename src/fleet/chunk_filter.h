// ChunkFilter: a compact, approximate set of 64-bit chunk ids: a cuckoo
// filter (Fan, Andersen, Kaminsky and Mitzenmacher, "Cuckoo Filter:
// Practically Better Than Bloom", 2014) of 16-bit fingerprints in buckets of
// four, one 64-bit word per bucket. One per peer in the PeerDirectory.
//
// Why this shape: it deletes (a peer's evictions reach the directory as
// removals, which a Bloom filter cannot take), it costs 2 bytes per slot
// (2.5 bytes per chunk at the 80 % load it is sized for: it takes 95 %, but
// near that an insert moves hundreds of fingerprints, and a peer's feed
// inserts and erases all the time), and a query reads
// two words, which MayContain's callers prefetch across many filters at once.
// A chunk is present at most once (Insert of a chunk that may be present
// does nothing), so a peer's repeated "stored" events cannot pile up
// copies that one "removed" would not clear.
//
// What it gets wrong, and the cost (docs/scaling.md):
//   * a false positive: another chunk's fingerprint in one of the two
//     buckets, about 8 / 65536 = 1.2e-4 per query of a full filter;
//   * a false negative: Insert of a chunk whose fingerprint collides with a
//     present one's in its buckets (it is taken as present), Erase of such a
//     twin (it removes the shared fingerprint), or a full filter (Insert
//     answers kFull; the chunk is not held).
//
// Thread-safety: one writer at a time (Insert, Erase, Clear: the caller
// serialises them); MayContain and Prefetch from any threads at once,
// lock-free: each reads a bucket word atomically, so a query racing a write
// sees the word before or after it (a chunk being moved between its two
// buckets may be missed for that instant: a false negative, never a crash).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace lmcache::fleet {

class ChunkFilter {
 public:
  // Room for `capacity` chunks at 80 % load (at least one bucket).
  explicit ChunkFilter(std::uint64_t capacity);
  ChunkFilter(const ChunkFilter&) = delete;
  ChunkFilter& operator=(const ChunkFilter&) = delete;

  enum class Inserted : std::uint8_t { kInserted, kPresent, kFull };
  Inserted Insert(std::uint64_t chunk);
  // True if a fingerprint of `chunk` was removed.
  bool Erase(std::uint64_t chunk);
  void Clear();

  bool MayContain(std::uint64_t chunk) const;
  // Asks the CPU for `chunk`'s two bucket words ahead of a MayContain.
  void Prefetch(std::uint64_t chunk) const;

  std::uint64_t size() const { return size_.load(std::memory_order_relaxed); }
  std::uint64_t slots() const { return 4 * buckets_count_; }
  std::uint64_t memory_bytes() const { return 8 * buckets_count_; }

 private:
  struct Place {
    std::uint64_t first;   // bucket index
    std::uint64_t second;  // the alternate bucket
    std::uint16_t fingerprint;
  };
  Place PlaceOf(std::uint64_t chunk) const;
  std::uint64_t Alternate(std::uint64_t bucket, std::uint16_t fingerprint) const;
  // Writes `fingerprint` into a free slot of `bucket`; false when it is full.
  bool PutFree(std::uint64_t bucket, std::uint16_t fingerprint);
  bool BucketHas(std::uint64_t bucket, std::uint16_t fingerprint) const;
  bool RemoveFrom(std::uint64_t bucket, std::uint16_t fingerprint);

  // Any count, not a power of two: rounding up would double a filter's
  // memory (the alternate bucket is a subtraction modulo the count).
  const std::uint64_t buckets_count_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;
  std::atomic<std::uint64_t> size_{0};
  // The fingerprint a failed relocation left homeless, with a bucket it may
  // live in (0 fingerprint: none). Once it is taken the filter is full.
  std::atomic<std::uint64_t> victim_{0};
  std::uint64_t random_ = 0x9e3779b97f4a7c15ull;  // the writer's victim choice
};

}  // namespace lmcache::fleet
