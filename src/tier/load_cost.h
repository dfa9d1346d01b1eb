// LoadCost: what loading from one L2 adapter costs now, and the rule that
// weighs it against recomputing (the load-or-recompute policy).
//
// LoadCostMeter keeps a moving average of the seconds one object of a load
// takes, as the prefetch sees it: each Load call's time from submission to
// completion (queueing in the adapter included) divided by its objects. A
// call of a batch runs its objects side by side, so this is the cost per
// object of a batch of that size, which is what a prefetch pays (a request
// loading fewer objects than the batches measured pays more per object).
// Only objects that loaded count: a call of misses says little. Until a
// first load completes nothing is known, and the policy loads. The figure
// also goes stale: a tier the policy declines is never loaded from, so
// never measured again, and would stay declined after it got fast; kStale
// after its last load the meter knows nothing again, the next prefetch
// loads from the tier, and that load's cost replaces the old average.
//
// BestPrefix: the leading chunks worth loading, given each chunk's load cost
// and the cost of recomputing one chunk. The engine recomputes whatever is
// not loaded after the prefix, so loading the first c chunks saves
// sum_{i<c} (recompute - load_i); the best c maximises that, and a slow
// chunk among fast ones is still loaded when the chunks after it make up
// for it. Ties go to the longer prefix (as loading would without a policy).
//
// Thread-safety: LoadCostMeter is internally synchronised (atomics);
// BestPrefix is a pure function.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace lmcache::tier {

class LoadCostMeter {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kStale{30};

  // One completed Load call that loaded `objects` objects in `took`, ending at `now`.
  void Record(std::uint64_t objects, std::chrono::nanoseconds took, Clock::time_point now);
  // The moving average of seconds per object; nullopt before any Record,
  // and from kStale after the last one.
  std::optional<double> SecondsPerObject(Clock::time_point now) const;
  // Chunks this adapter would have served that a prefetch declined because
  // recomputing them was cheaper.
  void CountDeclined(std::uint64_t chunks) { declined_.fetch_add(chunks, std::memory_order_relaxed); }
  std::uint64_t declined() const { return declined_.load(std::memory_order_relaxed); }

 private:
  // Weight of the newest call: about the last ten calls count.
  static constexpr double kWeight = 0.2;
  // Nanoseconds per object, as a double's bits; negative: nothing recorded.
  std::atomic<double> nanos_per_object_{-1.0};
  std::atomic<Clock::rep> last_record_{0};  // Clock ticks since its epoch
  std::atomic<std::uint64_t> declined_{0};
};

// The length of the prefix of chunks worth loading: `load_seconds[i]` is
// chunk i's load cost, `recompute_seconds` one chunk's recompute cost (> 0).
std::size_t BestPrefix(std::span<const double> load_seconds, double recompute_seconds);

}  // namespace lmcache::tier
