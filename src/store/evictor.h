// Evictor: the background thread that keeps L1 usage under its watermarks.
//
// Every `interval_ms`, and at once when an admission takes usage over the
// trigger (it listens to the table's admissions), it frees staging
// copies whose write lease expired and retired objects whose leases ended,
// trims tenants over their quotas (a quota lowered below what was locked),
// then, if usage >= trigger_watermark, evicts unlocked LRU objects until usage
// is at or below the low watermark (trigger - ratio, both fractions of the
// capacity). Unlike the reference (a fraction of the key count per tick, spec
// 12.1) this frees a predictable number of bytes. The loop never dies: an
// exception in a pass is logged and counted, and the next pass runs as usual.
//
// Its thread is a PeriodicThread, whose last run is the evictor's heartbeat.
// Thread-safety: Start/Stop from one controlling thread; Nudge, Stats and the
// listener callbacks from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "common/periodic_thread.h"
#include "lmcache/status.h"
#include "store/listener.h"
#include "store/object_table.h"
#include "store/store_stats.h"

namespace lmcache::store {

struct EvictorConfig {
  double trigger_watermark = 0.8;    // --eviction-trigger-watermark: fraction of capacity, (0, 1]
  double eviction_ratio = 0.2;       // --eviction-ratio: fraction of capacity to free, (0, 1]
  std::uint32_t interval_ms = 1000;  // --eviction-interval-ms: time between passes
};

// Why a config is invalid, naming the flag; OK otherwise.
Status ValidateEvictorConfig(const EvictorConfig& config);

class Evictor final : public StoreListener {
 public:
  Evictor(ObjectTable* table, const EvictorConfig& config);
  ~Evictor() override;  // stops the thread
  Evictor(const Evictor&) = delete;
  Evictor& operator=(const Evictor&) = delete;

  void Start() { thread_.Start(); }
  void Stop() { thread_.Stop(); }
  void Nudge() { thread_.Nudge(); }
  const EvictorConfig& config() const { return config_; }
  // One pass on the caller's thread (what the thread runs each interval).
  void RunPass();
  EvictorStats Stats() const;

  // An admission that leaves usage at or over the trigger starts a pass now
  // instead of at the next interval. At most one nudge is outstanding, so a
  // pool full of locked objects does not turn every admission into a pass.
  void OnAdmitted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes,
                  AdmissionSource source) override;
  void OnEvicted(std::span<const ObjectKey>, std::span<const std::uint64_t>) override {}
  void OnDeleted(std::span<const ObjectKey>, std::span<const std::uint64_t>) override {}

  // Bytes a pass starting at `used` would evict; 0 below the trigger.
  static std::uint64_t BytesToEvict(std::uint64_t used, std::uint64_t capacity,
                                    const EvictorConfig& config);

 private:
  ObjectTable* const table_;
  const EvictorConfig config_;
  PeriodicThread thread_;

  EvictorCounters counters_;
  std::atomic<bool> nudge_pending_{false};  // cleared when the nudged pass starts
};

}  // namespace lmcache::store
