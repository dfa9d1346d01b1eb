#include "tier/load_cost.h"

#include <algorithm>

namespace lmcache::tier {

void LoadCostMeter::Record(std::uint64_t objects, std::chrono::nanoseconds took,
                           Clock::time_point now) {
  if (objects == 0) return;
  const Clock::time_point previous{Clock::duration(
      last_record_.exchange(now.time_since_epoch().count(), std::memory_order_relaxed))};
  // After a stale figure the tier is measured afresh: the old average, from
  // before it was declined, does not weigh on the new one.
  const bool fresh = now - previous >= kStale;
  const double sample = static_cast<double>(std::max<std::int64_t>(0, took.count())) /
                        static_cast<double>(objects);
  double seen = nanos_per_object_.load(std::memory_order_relaxed);
  double next = 0;
  do {
    next = seen < 0 || fresh ? sample : seen + kWeight * (sample - seen);
  } while (!nanos_per_object_.compare_exchange_weak(seen, next, std::memory_order_relaxed));
}

std::optional<double> LoadCostMeter::SecondsPerObject(Clock::time_point now) const {
  const double nanos = nanos_per_object_.load(std::memory_order_relaxed);
  if (nanos < 0) return std::nullopt;
  const Clock::time_point last{Clock::duration(last_record_.load(std::memory_order_relaxed))};
  if (now - last >= kStale) return std::nullopt;
  return nanos * 1e-9;
}

std::size_t BestPrefix(std::span<const double> load_seconds, double recompute_seconds) {
  double saved = 0;
  double best_saved = 0;
  std::size_t best = 0;
  for (std::size_t i = 0; i < load_seconds.size(); ++i) {
    saved += recompute_seconds - load_seconds[i];
    if (saved >= best_saved) {
      best_saved = saved;
      best = i + 1;
    }
  }
  return best;
}

}  // namespace lmcache::tier
