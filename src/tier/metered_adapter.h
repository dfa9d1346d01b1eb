// MeteredAdapter: wraps one L2 adapter and measures it as the controllers
// use it: per adapter, the objects in calls now (store and load: the
// adapter's own queue depth as the server sees it) and latency histograms of
// each Store, lookup and Load call. L2Tier wraps every configured
// adapter, so `stats` and /metrics show where an L2 tier spends its time
// adapter by adapter (a slow Redis next to a fast disk), and what one
// object of a load costs (load_cost(): the load-or-recompute policy's input).
//
// Thread-safety: as the wrapped adapter; the meters are atomics.
#pragma once

#include "tier/forwarding_adapter.h"
#include "tier/tier_stats.h"

namespace lmcache::tier {

class MeteredAdapter final : public ForwardingAdapter {
 public:
  explicit MeteredAdapter(std::unique_ptr<L2Adapter> inner);

  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override;
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override;
  void SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes,
                    LookupDone done) override;
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override;
  L2AdapterStats Stats() const override;
  LoadCostMeter* load_cost() override { return &cost_; }

 private:
  // Counts `objects` in flight from a call's start to its completion and
  // records how long that took.
  class Meter;

  LMC_STATS_COUNTERS(Meters, L2AdapterStats, LMC_L2_METERED_STATS);
  Meters meters_;
  LoadCostMeter cost_;
};

}  // namespace lmcache::tier
