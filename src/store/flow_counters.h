// FlowCounters: a StoreListener that counts objects and bytes flowing into and
// out of L1: admitted (by source), evicted and deleted. The statistics and
// the metrics read these instead of each counting at their own call sites.
//
// Thread-safety: callbacks and Snapshot() may run on any threads at once
// (relaxed atomics; a snapshot is not a cut across counters).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "store/listener.h"
#include "store/store_stats.h"

namespace lmcache::store {

class FlowCounters final : public StoreListener {
 public:
  void OnAdmitted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes,
                  AdmissionSource source) override;
  void OnEvicted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes) override;
  void OnDeleted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes) override;
  FlowStats Snapshot() const;

 private:
  FlowCounterSet counters_;
};

}  // namespace lmcache::store
