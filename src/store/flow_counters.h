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

namespace lmcache::store {

struct FlowStats {
  std::uint64_t admitted_objects = 0;  // by a client's store
  std::uint64_t admitted_bytes = 0;
  std::uint64_t tier_admitted_objects = 0;  // loaded from a slower tier
  std::uint64_t tier_admitted_bytes = 0;
  std::uint64_t evicted_objects = 0;
  std::uint64_t evicted_bytes = 0;
  std::uint64_t deleted_objects = 0;
  std::uint64_t deleted_bytes = 0;
};

class FlowCounters final : public StoreListener {
 public:
  void OnAdmitted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes,
                  AdmissionSource source) override;
  void OnEvicted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes) override;
  void OnDeleted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes) override;
  FlowStats Snapshot() const;

 private:
  struct Pair {
    std::atomic<std::uint64_t> objects{0};
    std::atomic<std::uint64_t> bytes{0};
    void Add(std::span<const std::uint64_t> sizes);
  };
  Pair admitted_;
  Pair tier_admitted_;
  Pair evicted_;
  Pair deleted_;
};

}  // namespace lmcache::store
