#include "common/clock.h"

#include <chrono>

namespace lmcache {

TimeMs SteadyClock::NowMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const Clock& SteadyClock::Instance() {
  static const SteadyClock* const kClock = new SteadyClock();  // never destroyed
  return *kClock;
}

double WallClockSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace lmcache
