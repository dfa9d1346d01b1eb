// Prometheus: the stats snapshot as valid text exposition: one HELP and TYPE
// per family, every sample of a family together, cumulative histograms whose
// +Inf bucket equals the count, escaped label values.
#include "admin_http/prometheus.h"
#include "fakes/prometheus_samples.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace lmcache::admin_http {
namespace {

server::StatsSnapshot Snapshot() {
  server::StatsSnapshot s;
  s.version = "0.1.0";
  s.allocator.capacity_bytes = 1000;
  s.allocator.used_bytes = 250;
  s.flow.evicted_objects = 7;
  s.lookup_requested_tokens = 4096;
  s.lookup_hit_tokens = 1024;
  server::OperationStats lookup{"lookup", 3, 1, {}};
  lookup.latency.buckets[0] = 1;  // <= 50 us
  lookup.latency.buckets[4] = 2;  // <= 1 ms
  lookup.latency.count = 3;
  lookup.latency.sum_us = 1500;
  s.operations.push_back(lookup);
  s.operations.push_back({"ping", 0, 0, {}});  // never called: not exported
  tier::L2Stats l2;
  tier::L2AdapterStats fs;
  fs.type = "fs";
  fs.stored_objects = 5;
  fs.condition = "disk full";
  l2.adapters.push_back(fs);
  s.l2 = l2;
  s.gpu.contexts = 2;
  s.gpu.mapped_allocations = 3;
  return s;
}


TEST(PrometheusTest, ReferenceNamesCarryTheSnapshotsFigures) {
  const auto samples = testing::PrometheusSamples(RenderPrometheus(Snapshot(), {true, ""}, Phase::kServing));
  EXPECT_EQ(samples.at("lmcache_mp_l1_memory_usage_bytes"), 250);
  EXPECT_EQ(samples.at("lmcache_mp_l1_usage_ratio"), 0.25);
  EXPECT_EQ(samples.at("lmcache_mp_l1_evicted_total"), 7);
  EXPECT_EQ(samples.at("lmcache_mp_lookup_requested_total"), 4096);
  EXPECT_EQ(samples.at("lmcache_mp_lookup_hit_total"), 1024);
  EXPECT_EQ(samples.at("lmcache_mp_requests_total{operation=\"lookup\"}"), 3);
  EXPECT_EQ(samples.at("lmcache_mp_request_errors_total{operation=\"lookup\"}"), 1);
  EXPECT_EQ(samples.count("lmcache_mp_requests_total{operation=\"ping\"}"), 0u);
  EXPECT_EQ(samples.at("lmcache_mp_l2_store_completed_objects_total{l2_name=\"fs-1\"}"), 5);
  EXPECT_EQ(samples.at("lmcache_mp_l2_healthy{l2_name=\"fs-1\"}"), 0);
  EXPECT_EQ(samples.at("lmcache_mp_healthy"), 1);
  EXPECT_EQ(samples.at("lmcache_mp_gpu_contexts"), 2);
  EXPECT_EQ(samples.at("lmcache_mp_gpu_mapped_allocations"), 3);
}

TEST(PrometheusTest, HistogramsAreCumulativeWithInfEqualToCount) {
  const auto samples = testing::PrometheusSamples(RenderPrometheus(Snapshot(), {true, ""}, Phase::kServing));
  const std::string base = "lmcache_mp_request_duration_seconds";
  EXPECT_EQ(samples.at(base + "_bucket{operation=\"lookup\",le=\"5e-05\"}"), 1);
  EXPECT_EQ(samples.at(base + "_bucket{operation=\"lookup\",le=\"0.001\"}"), 3);
  EXPECT_EQ(samples.at(base + "_bucket{operation=\"lookup\",le=\"+Inf\"}"), 3);
  EXPECT_EQ(samples.at(base + "_count{operation=\"lookup\"}"), 3);
  EXPECT_DOUBLE_EQ(samples.at(base + "_sum{operation=\"lookup\"}"), 0.0015);
}

TEST(PrometheusTest, EveryFamilyHasOneHelpAndTypeAndItsSamplesTogether) {
  const std::string text = RenderPrometheus(Snapshot(), {false, "draining"}, Phase::kDraining);
  std::istringstream in(text);
  std::string line;
  std::set<std::string> declared;
  std::string current;
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$)");
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(declared.insert(name).second) << "declared twice: " << name;
      current = name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) continue;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
    const std::string name = m[1];
    EXPECT_TRUE(name == current || name == current + "_bucket" || name == current + "_sum" ||
                name == current + "_count")
        << name << " outside its family " << current;
  }
  EXPECT_NE(text.find("lmcache_mp_draining 1"), std::string::npos);
}

TEST(PrometheusTest, LabelValuesAreEscaped) {
  server::StatsSnapshot s = Snapshot();
  s.version = "1.0 \"quoted\"\\back\nline";
  const std::string text = RenderPrometheus(s, {true, ""}, Phase::kServing);
  EXPECT_NE(text.find(R"(lmcache_mp_build_info{version="1.0 \"quoted\"\\back\nline"} 1)"),
            std::string::npos)
      << text.substr(0, 300);
}

}  // namespace
}  // namespace lmcache::admin_http
