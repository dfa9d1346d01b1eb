// FlowCounters: admissions by source, evictions and deletions, in objects and bytes.
#include "store/flow_counters.h"

#include <gtest/gtest.h>

#include <vector>

#include "fakes/keys.h"

namespace lmcache::store {
namespace {

TEST(FlowCountersTest, CountsEachFlowSeparately) {
  FlowCounters counters;
  const auto keys = testing::KeysN(0, 3);
  const std::vector<std::uint64_t> bytes = {4096, 8192, 4096};
  counters.OnAdmitted(keys, bytes, AdmissionSource::kWriter);
  counters.OnAdmitted(std::span(keys).first(1), std::span(bytes).first(1), AdmissionSource::kTier);
  counters.OnEvicted(std::span(keys).first(2), std::span(bytes).first(2));
  counters.OnDeleted(std::span(keys).last(1), std::span(bytes).last(1));
  const FlowStats s = counters.Snapshot();
  EXPECT_EQ(s.admitted_objects, 3u);
  EXPECT_EQ(s.admitted_bytes, 16384u);
  EXPECT_EQ(s.tier_admitted_objects, 1u);
  EXPECT_EQ(s.tier_admitted_bytes, 4096u);
  EXPECT_EQ(s.evicted_objects, 2u);
  EXPECT_EQ(s.evicted_bytes, 12288u);
  EXPECT_EQ(s.deleted_objects, 1u);
  EXPECT_EQ(s.deleted_bytes, 4096u);
}

}  // namespace
}  // namespace lmcache::store
