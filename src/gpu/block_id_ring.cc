#include "gpu/block_id_ring.h"

#include "common/check.h"

namespace lmcache::gpu {

std::optional<std::uint64_t> BlockIdRing::Reserve(std::uint64_t count) {
  count = count == 0 ? 1 : count;  // every transfer holds a range, so releases stay in step
  MutexLock lock(&mu_);
  if (count > capacity_) return std::nullopt;
  std::uint64_t at = held_.empty() ? 0 : head_;
  if (!held_.empty()) {
    const std::uint64_t tail = held_.front().begin;
    const bool wrapped = held_.back().begin < tail;  // the newest range started over at 0
    if (wrapped) {  // free space is [head, tail)
      if (tail - at < count) return std::nullopt;
    } else {  // free space is [head, capacity) and [0, tail)
      if (capacity_ - at < count) at = 0;
      if (at == 0 && count > tail) return std::nullopt;
    }
  }
  held_.push_back({at, at + count});
  head_ = at + count;
  return at;
}

void BlockIdRing::Release(std::uint64_t offset) {
  MutexLock lock(&mu_);
  LMC_CHECK(!held_.empty() && held_.front().begin == offset);
  held_.pop_front();
}

std::uint64_t BlockIdRing::in_use() const {
  MutexLock lock(&mu_);
  std::uint64_t used = 0;
  for (const Range& r : held_) used += r.end - r.begin;
  return used;
}

}  // namespace lmcache::gpu
