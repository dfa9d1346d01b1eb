// Clock: the monotonic time source of leases, eviction recency and timers.
//
// Everything that expires (TTL leases, session idleness, worker liveness) asks a
// Clock for the time instead of calling std::chrono directly, so tests drive
// time with a fake clock (tests/fakes/fake_clock.h) instead of sleeping.
// Thread-safety: implementations must be safe to call from any thread.
#pragma once

#include <cstdint>

namespace lmcache {

// Milliseconds on a monotonic timeline with an arbitrary origin.
using TimeMs = std::int64_t;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimeMs NowMs() const = 0;
};

// std::chrono::steady_clock. The process-wide instance never dies.
class SteadyClock final : public Clock {
 public:
  TimeMs NowMs() const override;
  static const Clock& Instance();
};

// Wall-clock seconds since the Unix epoch (for "last success at" figures only).
double WallClockSeconds();

}  // namespace lmcache
