// GET /status/memory-pressure's report. The expected values are the
// reference's own (LMCache tests/v1/multiprocess: test_memory_pressure.py's
// classification cases and test_info_api.py's report for an L1 at 80 of 100
// bytes with trigger 0.8 and one L2 adapter), so a client written against the
// reference's InstanceMemoryPressureReport reads ours unchanged.
#include "admin_http/memory_pressure.h"

#include <gtest/gtest.h>

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

server::ServerStatus Status(std::uint64_t l1_used, std::uint64_t l1_capacity) {
  server::ServerStatus status;
  status.instance_id = "mp-a";
  status.eviction_policy = "LRU";
  status.eviction_trigger_watermark = 0.8;
  status.stats.allocator.used_bytes = l1_used;
  status.stats.allocator.capacity_bytes = l1_capacity;
  return status;
}

tier::L2AdapterStats Adapter(std::string type, std::uint64_t used, std::uint64_t capacity) {
  tier::L2AdapterStats adapter;
  adapter.type = std::move(type);
  adapter.usage_bytes = used;
  adapter.capacity_bytes = capacity;
  return adapter;
}

TEST(MemoryPressureTest, LevelsFollowTheTriggerWatermarkAndCapacityAsTheReferenceClassifies) {
  EXPECT_EQ(ClassifyPressure(80, 100, 0.8), PressureLevel::kHigh);
  EXPECT_EQ(ClassifyPressure(79, 100, 0.8), PressureLevel::kNormal);
  EXPECT_EQ(ClassifyPressure(100, 100, 0.8), PressureLevel::kCritical);
  EXPECT_EQ(ClassifyPressure(123, 100, 0.8), PressureLevel::kCritical);
  EXPECT_EQ(ClassifyPressure(99, 100, std::nullopt), PressureLevel::kNormal);
  EXPECT_EQ(ClassifyPressure(10, std::nullopt, 0.8), PressureLevel::kUnknown);
  EXPECT_EQ(ClassifyPressure(10, 0, 0.8), PressureLevel::kUnknown);
  EXPECT_EQ(ClassifyPressure(std::nullopt, 100, 0.8), PressureLevel::kUnknown);
}

TEST(MemoryPressureTest, TheReportHasTheReferencesShapeWithL1FirstThenEachAdapter) {
  server::ServerStatus status = Status(80, 100);
  status.stats.l2.emplace();
  tier::L2AdapterStats fs = Adapter("fs", 10, 100);
  fs.condition = "disk full";
  status.stats.l2->adapters.push_back(fs);
  const json report = MemoryPressureJson(status, 1234);
  EXPECT_EQ(report["instance_id"], "mp-a");
  EXPECT_EQ(report["timestamp_ms"], 1234);
  EXPECT_EQ(report["overall_level"], "high");
  EXPECT_EQ(report["complete"], true);
  ASSERT_EQ(report["tiers"].size(), 2u);
  EXPECT_EQ(report["tiers"][0], json::parse(R"({
    "tier": "l1", "adapter_id": null, "backend_type": null, "used_bytes": 80,
    "capacity_bytes": 100, "used_ratio": 0.8, "trigger_watermark": 0.8,
    "eviction_policy": "LRU", "health": "ok", "level": "high", "collection_errors": []})"));
  EXPECT_EQ(report["tiers"][1], json::parse(R"({
    "tier": "l2", "adapter_id": 0, "backend_type": "fs", "used_bytes": 10,
    "capacity_bytes": 100, "used_ratio": 0.1, "trigger_watermark": null,
    "eviction_policy": "LRU", "health": "failed", "level": "normal",
    "collection_errors": ["disk full"]})"));
}

TEST(MemoryPressureTest, AnUnboundedTierIsUnknownAndLeavesTheReportIncomplete) {
  server::ServerStatus status = Status(10, 100);
  status.stats.l2.emplace();
  status.stats.l2->adapters.push_back(Adapter("fs", 100, 100));
  status.stats.l2->adapters.push_back(Adapter("resp", 5, 0));  // Redis bounds itself
  const json report = MemoryPressureJson(status, 0);
  EXPECT_EQ(report["overall_level"], "critical");  // the highest known level
  EXPECT_EQ(report["complete"], false);
  EXPECT_EQ(report["tiers"][2]["level"], "unknown");
  EXPECT_EQ(report["tiers"][2]["adapter_id"], 1);
  EXPECT_EQ(report["tiers"][2]["capacity_bytes"], nullptr);
  EXPECT_EQ(report["tiers"][2]["used_ratio"], nullptr);
  EXPECT_EQ(report["tiers"][2]["eviction_policy"], nullptr);
}

TEST(MemoryPressureTest, WithNoKnownTierTheOverallLevelIsUnknown) {
  const json report = MemoryPressureJson(Status(0, 0), 0);
  EXPECT_EQ(report["overall_level"], "unknown");
  EXPECT_EQ(report["complete"], false);
}

}  // namespace
}  // namespace lmcache::admin_http
