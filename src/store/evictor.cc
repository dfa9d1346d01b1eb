#include "store/evictor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <exception>
#include <string>

#include "stats/ratio.h"

namespace lmcache::store {

Status ValidateEvictorConfig(const EvictorConfig& config) {
  if (!(config.trigger_watermark > 0 && config.trigger_watermark <= 1)) {
    return InvalidConfig("--eviction-trigger-watermark must be in (0, 1], got " +
                         std::to_string(config.trigger_watermark));
  }
  if (!(config.eviction_ratio > 0 && config.eviction_ratio <= 1)) {
    return InvalidConfig("--eviction-ratio must be in (0, 1], got " +
                         std::to_string(config.eviction_ratio));
  }
  if (config.interval_ms == 0) return InvalidConfig("--eviction-interval-ms must be > 0");
  return Status::Ok();
}

std::uint64_t Evictor::BytesToEvict(std::uint64_t used, std::uint64_t capacity,
                                    const EvictorConfig& config) {
  const std::optional<double> usage = stats::UsedRatio(used, capacity);
  if (!usage || *usage < config.trigger_watermark) return 0;
  const double low = std::max(0.0, config.trigger_watermark - config.eviction_ratio);
  const auto target = static_cast<std::uint64_t>(std::floor(low * static_cast<double>(capacity)));
  return used > target ? used - target : 0;
}

Evictor::Evictor(ObjectTable* table, const EvictorConfig& config)
    : table_(table),
      config_(config),
      thread_("evictor", std::chrono::milliseconds(config.interval_ms), [this] { RunPass(); }) {}

Evictor::~Evictor() { Stop(); }

void Evictor::OnAdmitted(std::span<const ObjectKey> /*keys*/,
                         std::span<const std::uint64_t> /*bytes*/, AdmissionSource /*source*/) {
  alloc::SlabAllocator& allocator = table_->allocator();
  if (BytesToEvict(allocator.UsedBytes(), allocator.capacity_bytes(), config_) == 0) return;
  if (nudge_pending_.exchange(true, std::memory_order_acq_rel)) return;
  counters_.nudges.fetch_add(1, std::memory_order_relaxed);
  thread_.Nudge();
}

void Evictor::RunPass() {
  nudge_pending_.store(false, std::memory_order_release);
  counters_.passes.fetch_add(1, std::memory_order_relaxed);
  try {
    counters_.reclaimed_objects.fetch_add(table_->ReclaimExpired(), std::memory_order_relaxed);
    // A quota lowered below what its tenant holds: the rest of the trim, now
    // that more of its objects may be unlocked.
    table_->TrimOverQuota();
    alloc::SlabAllocator& allocator = table_->allocator();
    const std::uint64_t to_evict =
        BytesToEvict(allocator.UsedBytes(), allocator.capacity_bytes(), config_);
    if (to_evict > 0) {
      counters_.triggered_passes.fetch_add(1, std::memory_order_relaxed);
      const EvictionReport report =
          Biased() ? EvictBiased(to_evict) : table_->EvictLru(to_evict);
      counters_.evicted_objects.fetch_add(report.objects, std::memory_order_relaxed);
      counters_.evicted_bytes.fetch_add(report.bytes, std::memory_order_relaxed);
      if (report.bytes < to_evict) {
        spdlog::debug("eviction freed {} of {} bytes: the rest is locked or staging", report.bytes,
                      to_evict);
      }
    }
    counters_.last_success_wall_seconds.store(WallClockSeconds(), std::memory_order_relaxed);
  } catch (const std::exception& e) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("eviction pass failed (the loop goes on): {}", e.what());
  } catch (...) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("eviction pass failed with an unknown exception (the loop goes on)");
  }
}

bool Evictor::Biased() const {
  MutexLock lock(&bias_mu_);
  return bias_ != nullptr;
}

void Evictor::SetBias(const EvictionBias* bias, double horizon_fraction) {
  MutexLock lock(&bias_mu_);
  bias_ = bias;
  bias_horizon_ = horizon_fraction;
}

std::vector<std::size_t> Evictor::LastCopyOrder(std::span<const UsedCandidate> window,
                                                const std::vector<bool>& expendable,
                                                std::uint64_t horizon) {
  // A last copy is ranked as if used `horizon` uses later than it was.
  std::vector<std::uint64_t> rank(window.size());
  for (std::size_t i = 0; i < window.size(); ++i) {
    rank[i] = window[i].last_use + (expendable[i] ? 0 : horizon);
  }
  std::vector<std::size_t> order(window.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&rank](std::size_t a, std::size_t b) { return rank[a] < rank[b]; });
  return order;
}

EvictionReport Evictor::EvictBiased(std::uint64_t bytes) {
  // Every candidate a round looked at, with its last use: what plain LRU
  // would have evicted is the oldest of them.
  std::unordered_map<ObjectKey, std::uint64_t, ObjectKeyHash> seen;
  std::uint64_t checked = 0;
  std::uint64_t expendable_count = 0;
  const auto order = [&](std::span<const UsedCandidate> window, std::size_t resident) {
    std::vector<ObjectKey> keys;
    keys.reserve(window.size());
    for (const UsedCandidate& c : window) {
      keys.push_back(c.key);
      seen.emplace(c.key, c.last_use);
    }
    // The bias is read under its lock for each round, never across the
    // table's shard locks (EvictFrom asks for a round before it locks):
    // removed meanwhile, the rest of the pass is plain LRU.
    std::vector<bool> expendable;
    double horizon_fraction = 0;
    {
      MutexLock lock(&bias_mu_);
      if (bias_ == nullptr) return keys;
      expendable = bias_->Expendable(keys);
      horizon_fraction = bias_horizon_;
    }
    expendable.resize(window.size(), false);
    checked += window.size();
    expendable_count +=
        static_cast<std::uint64_t>(std::count(expendable.begin(), expendable.end(), true));
    const auto horizon =
        static_cast<std::uint64_t>(horizon_fraction * static_cast<double>(resident));
    std::vector<ObjectKey> ordered;
    ordered.reserve(window.size());
    for (const std::size_t i : LastCopyOrder(window, expendable, horizon)) {
      ordered.push_back(keys[i]);
    }
    return ordered;
  };
  std::vector<ObjectKey> evicted;
  const EvictionReport report = table_->EvictReordered(bytes, order, &evicted);
  // Spared: of the oldest candidates, as many as the pass evicted (what
  // plain LRU would have evicted), those still in L1 (or found locked).
  const std::unordered_set<ObjectKey, ObjectKeyHash> gone(evicted.begin(), evicted.end());
  std::vector<std::pair<std::uint64_t, const ObjectKey*>> by_use;
  by_use.reserve(seen.size());
  for (const auto& [key, last_use] : seen) by_use.emplace_back(last_use, &key);
  const std::size_t went = std::min(gone.size(), by_use.size());
  std::partial_sort(by_use.begin(), by_use.begin() + static_cast<std::ptrdiff_t>(went),
                    by_use.end(),
                    [](const auto& a, const auto& b) { return a.first < b.first; });
  std::uint64_t spared = 0;
  for (std::size_t i = 0; i < went; ++i) {
    if (!gone.contains(*by_use[i].second)) spared += 1;
  }
  counters_.last_copy_checked.fetch_add(checked, std::memory_order_relaxed);
  counters_.last_copy_expendable.fetch_add(expendable_count, std::memory_order_relaxed);
  counters_.last_copies_spared.fetch_add(spared, std::memory_order_relaxed);
  return report;
}

EvictorStats Evictor::Stats() const {
  EvictorStats stats;
  counters_.CopyTo(&stats);
  stats.last_run_ms = thread_.last_run_ms();
  stats.interval_ms = config_.interval_ms;
  return stats;
}

LMC_STATS_ROWS(EvictorStatRows, EvictorStats, LMC_EVICTOR_STATS)

}  // namespace lmcache::store
