// What the exporters write, pinned byte for byte: the msgpack `stats` reply
// (with and without an L2 tier), the Prometheus exposition, GET /status and
// GET /status/memory-pressure, all rendered from one populated snapshot
// (fakes/populated_stats.h, every figure distinct). A change to how a
// counter is declared, collected or walked must leave all five unchanged;
// a change that means to alter an export regenerates the files with
// LMC_UPDATE_GOLDEN=1 and shows the difference in review.
//
// The files were first written at 9c25edd, before the counters were
// declared once next to their components (issue 41, step 3).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "admin_http/memory_pressure.h"
#include "admin_http/prometheus.h"
#include "admin_http/status_json.h"
#include "fakes/populated_stats.h"
#include "server/stats.h"

namespace lmcache::server {
namespace {

std::string GoldenPath(const std::string& name) { return std::string(LMC_GOLDEN_DIR) + "/" + name; }

// Bytes as lines of 32 hex digits, so a difference shows where it is.
std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
    if (i % 16 == 15 || i + 1 == bytes.size()) out += '\n';
  }
  return out;
}

// Compares `actual` with the golden file, or writes it under LMC_UPDATE_GOLDEN=1.
void ExpectGolden(const std::string& name, const std::string& actual) {
  const std::string path = GoldenPath(name);
  if (std::getenv("LMC_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "no golden file " << path << ": run with LMC_UPDATE_GOLDEN=1 once";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(expected.str(), actual) << name << " changed; if that is meant, rerun with "
                                    << "LMC_UPDATE_GOLDEN=1 and review the difference";
}

ServerStatus PopulatedStatus(bool with_l2) {
  ServerStatus status;
  status.stats = testing::PopulatedStats(with_l2);
  status.pool_name = "/lmcache-golden";
  status.chunk_sizes = store::ChunkSizes(256);
  status.instance_id = "node-7";
  status.eviction_policy = "LRU";
  status.eviction_trigger_watermark = 0.8;
  status.p2p.enabled = true;
  status.p2p.advertise_url = "10.0.0.7:5556";
  status.p2p.key_fingerprint = "0123456789abcdef";
  worker::InstanceInfo info;
  info.instance_id = 3;
  info.model_name = "llama";
  info.world_size = 2;
  status.instances.push_back(info);
  return status;
}

TEST(StatsExportsTest, MsgpackReplyIsUnchanged) {
  ExpectGolden("stats_with_l2.msgpack.hex", Hex(EncodeStatsMsgpack(testing::PopulatedStats(true))));
  ExpectGolden("stats_without_l2.msgpack.hex",
               Hex(EncodeStatsMsgpack(testing::PopulatedStats(false))));
}

TEST(StatsExportsTest, PrometheusExpositionIsUnchanged) {
  const admin_http::HealthVerdict unhealthy{false, "the evictor is wedged"};
  ExpectGolden("metrics.prom", admin_http::RenderPrometheus(testing::PopulatedStats(true), unhealthy,
                                                            admin_http::Phase::kServing));
}

TEST(StatsExportsTest, StatusJsonIsUnchanged) {
  const admin_http::HealthVerdict healthy{true, ""};
  ExpectGolden("status_with_l2.json",
               admin_http::StatusJson(PopulatedStatus(true), healthy, admin_http::Phase::kServing, 42)
                       .dump(2) + "\n");
  ExpectGolden("status_without_l2.json",
               admin_http::StatusJson(PopulatedStatus(false), healthy, admin_http::Phase::kDraining, 42)
                       .dump(2) + "\n");
}

TEST(StatsExportsTest, MemoryPressureIsUnchanged) {
  ExpectGolden("memory_pressure.json",
               admin_http::MemoryPressureJson(PopulatedStatus(true), 1700000000000).dump(2) + "\n");
}

}  // namespace
}  // namespace lmcache::server
