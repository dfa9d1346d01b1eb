// FakeClock: a Clock that moves only when a test advances it.
// Thread-safety: NowMs and Advance may be called from any thread.
#pragma once

#include <atomic>

#include "common/clock.h"

namespace lmcache::testing {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimeMs start = 1'000'000) : now_(start) {}
  TimeMs NowMs() const override { return now_.load(std::memory_order_relaxed); }
  void Advance(TimeMs ms) { now_.fetch_add(ms, std::memory_order_relaxed); }

 private:
  std::atomic<TimeMs> now_;
};

}  // namespace lmcache::testing
