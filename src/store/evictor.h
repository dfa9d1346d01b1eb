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
// With a bias (SetBias: P2P's directory, issue 43 section 3) a pass keeps
// the fleet's last copies longest. It takes the oldest candidates, about
// twice as many as it evicts (ObjectTable::EvictReordered), and evicts them
// in order of last use, a last copy's counted `horizon` uses later than it
// was (a copy another node also holds and keeps, EvictionBias::Expendable,
// counts as it is). So a last copy outlives only copies held elsewhere that
// were used less than `horizon` uses after it, and once `horizon` uses have
// passed since its own last use nothing used since can go before it: the
// bias is bounded, not a change of policy (horizon = --p2p-last-copy-bias x
// the resident objects).
// The store path's on-demand eviction (a full pool) stays plain LRU.
//
// Its thread is a PeriodicThread, whose last run is the evictor's heartbeat.
// Thread-safety: Start/Stop from one controlling thread; Nudge, Stats,
// SetBias and the listener callbacks from any thread. SetBias waits for a
// round asking the bias, so a bias it replaced is no longer used when it
// returns (the rest of that pass is plain LRU).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/periodic_thread.h"
#include "lmcache/status.h"
#include "store/listener.h"
#include "store/object_table.h"
#include "store/store_stats.h"

namespace lmcache::store {

// Which eviction candidates have another copy in the fleet that outlives ours.
// Thread-safety: called from the evictor's thread (a pass), never under a
// table lock.
class EvictionBias {
 public:
  virtual ~EvictionBias() = default;
  // For each of `keys`, whether our copy may go before older ones: another
  // node holds the chunk, and of its holders it is not ours the fleet keeps.
  virtual std::vector<bool> Expendable(std::span<const ObjectKey> keys) const = 0;
};

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
  // Passes from now on keep the fleet's last copies longest, within a
  // `horizon_fraction` x resident objects bound (see above); null: plain
  // LRU. `bias` must outlive its use: until SetBias(nullptr) returns.
  void SetBias(const EvictionBias* bias, double horizon_fraction) LMC_EXCLUDES(bias_mu_);

  // One round's order, as indices into `window` (oldest first): by last
  // use, a last copy's (not `expendable`) counted `horizon` uses later;
  // ties keep LRU order.
  static std::vector<std::size_t> LastCopyOrder(std::span<const UsedCandidate> window,
                                                const std::vector<bool>& expendable,
                                                std::uint64_t horizon);

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
  // Evicts `bytes` with the bias: the fleet's last copies last.
  EvictionReport EvictBiased(std::uint64_t bytes) LMC_EXCLUDES(bias_mu_);
  bool Biased() const LMC_EXCLUDES(bias_mu_);

  ObjectTable* const table_;
  const EvictorConfig config_;
  // Held while a round asks the bias (never with a table lock), so SetBias
  // never pulls a bias from under it.
  mutable Mutex bias_mu_;
  const EvictionBias* bias_ LMC_GUARDED_BY(bias_mu_) = nullptr;
  double bias_horizon_ LMC_GUARDED_BY(bias_mu_) = 0;
  PeriodicThread thread_;

  EvictorCounters counters_;
  std::atomic<bool> nudge_pending_{false};  // cleared when the nudged pass starts
};

}  // namespace lmcache::store
