#include "fleet/chunk_filter.h"

#include <algorithm>
#include <bit>

namespace lmcache::fleet {
namespace {

constexpr std::uint64_t kLanes = 0x0001'0001'0001'0001ull;  // 1 in each 16-bit lane
constexpr std::uint64_t kHighBits = 0x8000'8000'8000'8000ull;
constexpr int kMaxKicks = 500;
__extension__ using Wide = unsigned __int128;  // GCC's and clang's; -Wpedantic knows it so

// A lane of `word` that is zero: its high bit set in the result (exact for
// the lowest such lane, which is the only one used).
std::uint64_t ZeroLanes(std::uint64_t word) { return (word - kLanes) & ~word & kHighBits; }

std::uint64_t LanesEqual(std::uint64_t word, std::uint16_t fingerprint) {
  return ZeroLanes(word ^ (kLanes * fingerprint));
}

int LowestLane(std::uint64_t lanes) { return std::countr_zero(lanes) / 16; }

std::uint64_t WithLane(std::uint64_t word, int lane, std::uint16_t value) {
  const int shift = 16 * lane;
  return (word & ~(0xFFFFull << shift)) | (std::uint64_t{value} << shift);
}

// The victim's word: fingerprint in the low 16 bits, bucket above.
std::uint64_t PackVictim(std::uint64_t bucket, std::uint16_t fingerprint) {
  return (bucket << 16) | fingerprint;
}

}  // namespace

ChunkFilter::ChunkFilter(std::uint64_t capacity)
    : buckets_count_(std::max<std::uint64_t>(1, (capacity * 10 + 31) / 32)),
      buckets_(std::make_unique<std::atomic<std::uint64_t>[]>(buckets_count_)) {
  for (std::uint64_t i = 0; i < buckets_count_; ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

ChunkFilter::Place ChunkFilter::PlaceOf(std::uint64_t chunk) const {
  // Chunk ids are hashes already (blake3 of tokens): the low bits choose
  // the bucket, the top 16 the fingerprint (0 marks an empty slot).
  const auto fingerprint = static_cast<std::uint16_t>(std::max<std::uint64_t>(1, chunk >> 48));
  // The low 48 bits scaled onto the buckets (a multiply, no division).
  const auto first = static_cast<std::uint64_t>(
      (static_cast<Wide>(chunk << 16) * buckets_count_) >> 64);
  return {first, Alternate(first, fingerprint), fingerprint};
}

std::uint64_t ChunkFilter::Alternate(std::uint64_t bucket, std::uint16_t fingerprint) const {
  // An involution: Alternate(Alternate(b, f), f) == b, as (m - b) mod n is.
  const std::uint64_t m = ((fingerprint * 0x5bd1e995ull) >> 5) % buckets_count_;
  return m >= bucket ? m - bucket : m + buckets_count_ - bucket;
}

bool ChunkFilter::BucketHas(std::uint64_t bucket, std::uint16_t fingerprint) const {
  return LanesEqual(buckets_[bucket].load(std::memory_order_relaxed), fingerprint) != 0;
}

bool ChunkFilter::MayContain(std::uint64_t chunk) const {
  const Place p = PlaceOf(chunk);
  if (BucketHas(p.first, p.fingerprint) || BucketHas(p.second, p.fingerprint)) return true;
  const std::uint64_t victim = victim_.load(std::memory_order_relaxed);
  const auto victim_fingerprint = static_cast<std::uint16_t>(victim);
  const std::uint64_t victim_bucket = victim >> 16;
  return victim_fingerprint == p.fingerprint &&
         (victim_bucket == p.first || victim_bucket == p.second);
}

void ChunkFilter::Prefetch(std::uint64_t chunk) const {
  const Place p = PlaceOf(chunk);
  __builtin_prefetch(&buckets_[p.first]);
  __builtin_prefetch(&buckets_[p.second]);
}

bool ChunkFilter::PutFree(std::uint64_t bucket, std::uint16_t fingerprint) {
  const std::uint64_t word = buckets_[bucket].load(std::memory_order_relaxed);
  const std::uint64_t free = ZeroLanes(word);
  if (free == 0) return false;
  buckets_[bucket].store(WithLane(word, LowestLane(free), fingerprint), std::memory_order_relaxed);
  return true;
}

ChunkFilter::Inserted ChunkFilter::Insert(std::uint64_t chunk) {
  if (MayContain(chunk)) return Inserted::kPresent;
  if (victim_.load(std::memory_order_relaxed) != 0) return Inserted::kFull;
  const Place p = PlaceOf(chunk);
  if (PutFree(p.first, p.fingerprint) || PutFree(p.second, p.fingerprint)) {
    size_.fetch_add(1, std::memory_order_relaxed);
    return Inserted::kInserted;
  }
  // Both full: move a random resident to its other bucket, and on.
  std::uint64_t bucket = (random_ & 1) ? p.first : p.second;
  std::uint16_t homeless = p.fingerprint;
  for (int kick = 0; kick < kMaxKicks; ++kick) {
    random_ = random_ * 6364136223846793005ull + 1442695040888963407ull;
    const int lane = static_cast<int>(random_ >> 62);
    const std::uint64_t word = buckets_[bucket].load(std::memory_order_relaxed);
    const auto evicted = static_cast<std::uint16_t>(word >> (16 * lane));
    buckets_[bucket].store(WithLane(word, lane, homeless), std::memory_order_relaxed);
    homeless = evicted;
    bucket = Alternate(bucket, homeless);
    if (PutFree(bucket, homeless)) {
      size_.fetch_add(1, std::memory_order_relaxed);
      return Inserted::kInserted;
    }
  }
  // The chunk is in; the last one moved lives on in the victim slot, and
  // the filter takes no more.
  victim_.store(PackVictim(bucket, homeless), std::memory_order_relaxed);
  size_.fetch_add(1, std::memory_order_relaxed);
  return Inserted::kInserted;
}

bool ChunkFilter::RemoveFrom(std::uint64_t bucket, std::uint16_t fingerprint) {
  const std::uint64_t word = buckets_[bucket].load(std::memory_order_relaxed);
  const std::uint64_t equal = LanesEqual(word, fingerprint);
  if (equal == 0) return false;
  buckets_[bucket].store(WithLane(word, LowestLane(equal), 0), std::memory_order_relaxed);
  return true;
}

bool ChunkFilter::Erase(std::uint64_t chunk) {
  const Place p = PlaceOf(chunk);
  const std::uint64_t victim = victim_.load(std::memory_order_relaxed);
  bool erased = false;
  if (victim != 0 && static_cast<std::uint16_t>(victim) == p.fingerprint &&
      ((victim >> 16) == p.first || (victim >> 16) == p.second)) {
    victim_.store(0, std::memory_order_relaxed);
    erased = true;
  } else {
    erased = RemoveFrom(p.first, p.fingerprint) || RemoveFrom(p.second, p.fingerprint);
  }
  if (!erased) return false;
  size_.fetch_sub(1, std::memory_order_relaxed);
  // Room again: the victim goes back into a bucket if it can.
  const std::uint64_t homeless = victim_.load(std::memory_order_relaxed);
  if (homeless != 0) {
    const auto fingerprint = static_cast<std::uint16_t>(homeless);
    const std::uint64_t bucket = homeless >> 16;
    if (PutFree(bucket, fingerprint) || PutFree(Alternate(bucket, fingerprint), fingerprint)) {
      victim_.store(0, std::memory_order_relaxed);
    }
  }
  return true;
}

void ChunkFilter::Clear() {
  for (std::uint64_t i = 0; i < buckets_count_; ++i) buckets_[i].store(0, std::memory_order_relaxed);
  victim_.store(0, std::memory_order_relaxed);
  size_.store(0, std::memory_order_relaxed);
}

}  // namespace lmcache::fleet
