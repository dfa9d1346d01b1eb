// Health: whether the server should receive traffic, for /healthcheck and
// the container's probes.
//
// Healthy means: serving (not starting, not draining), every watched loop
// has beaten recently (the request loop, the evictor, the maintenance
// thread: a wedged loop fails the probe instead of hanging requests), and
// every readiness condition holds (the pool pre-faulted to the configured
// fraction). The first failing check is the reason.
//
// Thread-safety: Watch/Require before serving (not synchronised); SetPhase
// and Check from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"

namespace lmcache::admin_http {

enum class Phase : std::uint8_t { kStarting, kServing, kDraining };
std::string_view PhaseName(Phase phase);

struct HealthVerdict {
  bool healthy = false;
  std::string reason;  // empty when healthy
};

class Health {
 public:
  explicit Health(const Clock* clock) : clock_(clock) {}

  // `last_beat` returns the time (the clock's ms) of the loop's last beat, 0
  // if it never beat; the loop is wedged when it was silent for
  // `max_silence_ms` (a loop that never beat: since serving began).
  void Watch(std::string name, std::function<TimeMs()> last_beat, TimeMs max_silence_ms);
  // `why_not` returns why the server is not ready yet, or nullopt when it is.
  void Require(std::function<std::optional<std::string>()> why_not);

  void SetPhase(Phase phase);
  Phase phase() const { return phase_.load(std::memory_order_acquire); }
  HealthVerdict Check() const;

 private:
  struct Watched {
    std::string name;
    std::function<TimeMs()> last_beat;
    TimeMs max_silence_ms;
  };
  const Clock* const clock_;
  std::atomic<Phase> phase_{Phase::kStarting};
  std::atomic<TimeMs> serving_since_ms_{0};
  std::vector<Watched> watched_;
  std::vector<std::function<std::optional<std::string>()>> conditions_;
};

}  // namespace lmcache::admin_http
