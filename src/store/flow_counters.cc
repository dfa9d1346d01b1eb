#include "store/flow_counters.h"

#include <numeric>

namespace lmcache::store {

void FlowCounters::Pair::Add(std::span<const std::uint64_t> sizes) {
  objects.fetch_add(sizes.size(), std::memory_order_relaxed);
  bytes.fetch_add(std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0}),
                  std::memory_order_relaxed);
}

void FlowCounters::OnAdmitted(std::span<const ObjectKey> /*keys*/,
                              std::span<const std::uint64_t> bytes, AdmissionSource source) {
  (source == AdmissionSource::kTier ? tier_admitted_ : admitted_).Add(bytes);
}

void FlowCounters::OnEvicted(std::span<const ObjectKey> /*keys*/,
                             std::span<const std::uint64_t> bytes) {
  evicted_.Add(bytes);
}

void FlowCounters::OnDeleted(std::span<const ObjectKey> /*keys*/,
                             std::span<const std::uint64_t> bytes) {
  deleted_.Add(bytes);
}

FlowStats FlowCounters::Snapshot() const {
  auto load = [](const std::atomic<std::uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  FlowStats s;
  s.admitted_objects = load(admitted_.objects);
  s.admitted_bytes = load(admitted_.bytes);
  s.tier_admitted_objects = load(tier_admitted_.objects);
  s.tier_admitted_bytes = load(tier_admitted_.bytes);
  s.evicted_objects = load(evicted_.objects);
  s.evicted_bytes = load(evicted_.bytes);
  s.deleted_objects = load(deleted_.objects);
  s.deleted_bytes = load(deleted_.bytes);
  return s;
}

}  // namespace lmcache::store
