#include "store/flow_counters.h"

#include <numeric>

namespace lmcache::store {

namespace {

void Add(std::atomic<std::uint64_t>& objects, std::atomic<std::uint64_t>& bytes,
         std::span<const std::uint64_t> sizes) {
  objects.fetch_add(sizes.size(), std::memory_order_relaxed);
  bytes.fetch_add(std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0}),
                  std::memory_order_relaxed);
}

}  // namespace

LMC_STATS_ROWS(FlowStatRows, FlowStats, LMC_FLOW_STATS)

void FlowCounters::OnAdmitted(std::span<const ObjectKey> /*keys*/,
                              std::span<const std::uint64_t> bytes, AdmissionSource source) {
  if (source == AdmissionSource::kTier) {
    Add(counters_.tier_admitted_objects, counters_.tier_admitted_bytes, bytes);
  } else {
    Add(counters_.admitted_objects, counters_.admitted_bytes, bytes);
  }
}

void FlowCounters::OnEvicted(std::span<const ObjectKey> /*keys*/,
                             std::span<const std::uint64_t> bytes) {
  Add(counters_.evicted_objects, counters_.evicted_bytes, bytes);
}

void FlowCounters::OnDeleted(std::span<const ObjectKey> /*keys*/,
                             std::span<const std::uint64_t> bytes) {
  Add(counters_.deleted_objects, counters_.deleted_bytes, bytes);
}

FlowStats FlowCounters::Snapshot() const {
  FlowStats s;
  counters_.CopyTo(&s);
  return s;
}

}  // namespace lmcache::store
