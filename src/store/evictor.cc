#include "store/evictor.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <exception>
#include <string>

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
  if (capacity == 0) return 0;
  const double usage = static_cast<double>(used) / static_cast<double>(capacity);
  if (usage < config.trigger_watermark) return 0;
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
      const EvictionReport report = table_->EvictLru(to_evict);
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

EvictorStats Evictor::Stats() const {
  EvictorStats stats;
  counters_.CopyTo(&stats);
  stats.last_run_ms = thread_.last_run_ms();
  stats.interval_ms = config_.interval_ms;
  return stats;
}

LMC_STATS_ROWS(EvictorStatRows, EvictorStats, LMC_EVICTOR_STATS)

}  // namespace lmcache::store
