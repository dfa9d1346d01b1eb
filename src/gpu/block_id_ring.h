// BlockIdRing: where the block ids of a device context's queued transfers
// live, as offsets into a fixed buffer (pinned host memory and its device
// twin in the CUDA backend), handed out and given back first in, first out:
// transfers of one context complete in the order they were queued, so the
// oldest reservation is always the next one released. A reservation that
// does not fit waits for nothing: it is refused, and the transfer with it.
//
// Thread-safety: internally synchronised by a leaf mutex (no other lock and
// no CUDA call is taken while it is held), so the CUDA runtime's callback
// thread may release while a request thread reserves.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

#include "common/mutex.h"

namespace lmcache::gpu {

class BlockIdRing {
 public:
  explicit BlockIdRing(std::uint64_t capacity) : capacity_(capacity) {}
  // A contiguous range of `count` ids, or nullopt when it does not fit now.
  std::optional<std::uint64_t> Reserve(std::uint64_t count) LMC_EXCLUDES(mu_);
  // Gives back the oldest reservation, which must start at `offset`.
  void Release(std::uint64_t offset) LMC_EXCLUDES(mu_);
  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t in_use() const LMC_EXCLUDES(mu_);

 private:
  struct Range {
    std::uint64_t begin;
    std::uint64_t end;
  };
  const std::uint64_t capacity_;
  mutable Mutex mu_;
  std::deque<Range> held_ LMC_GUARDED_BY(mu_);  // oldest first
  std::uint64_t head_ LMC_GUARDED_BY(mu_) = 0;  // where the next range starts, if it fits
};

}  // namespace lmcache::gpu
