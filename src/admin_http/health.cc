#include "admin_http/health.h"

namespace lmcache::admin_http {

std::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting: return "starting";
    case Phase::kServing: return "serving";
    case Phase::kDraining: return "draining";
  }
  return "unknown";
}

void Health::Watch(std::string name, std::function<TimeMs()> last_beat, TimeMs max_silence_ms) {
  watched_.push_back({std::move(name), std::move(last_beat), max_silence_ms});
}

void Health::Require(std::function<std::optional<std::string>()> why_not) {
  conditions_.push_back(std::move(why_not));
}

void Health::SetPhase(Phase phase) {
  if (phase == Phase::kServing) serving_since_ms_.store(clock_->NowMs(), std::memory_order_release);
  phase_.store(phase, std::memory_order_release);
}

HealthVerdict Health::Check() const {
  const Phase current = phase();
  if (current != Phase::kServing) return {false, std::string(PhaseName(current))};
  const TimeMs now = clock_->NowMs();
  for (const Watched& w : watched_) {
    TimeMs beat = w.last_beat();
    if (beat == 0) beat = serving_since_ms_.load(std::memory_order_acquire);
    if (now > beat && now - beat > w.max_silence_ms) {
      return {false, w.name + " has made no progress for " + std::to_string((now - beat) / 1000) +
                         " s"};
    }
  }
  for (const auto& why_not : conditions_) {
    if (std::optional<std::string> reason = why_not()) return {false, *reason};
  }
  return {true, ""};
}

}  // namespace lmcache::admin_http
