// docs/metrics.md is what the schema generates: a field added to the schema
// (or an HTTP metric) without regenerating the doc fails here. With
// LMC_WRITE_METRICS_DOC=1 (tools/dev.sh metrics-doc) it rewrites the file.
#include "admin_http/metrics_doc.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "admin_http/prometheus.h"

namespace lmcache::admin_http {
namespace {

TEST(MetricsDocTest, TheCheckedInDocIsTheGeneratedOne) {
  const std::string generated = RenderMetricsDoc();
  if (const char* write = std::getenv("LMC_WRITE_METRICS_DOC"); write && std::string(write) == "1") {
    std::ofstream(LMC_METRICS_DOC) << generated;
  }
  std::ifstream in(LMC_METRICS_DOC);
  ASSERT_TRUE(in) << LMC_METRICS_DOC;
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_TRUE(doc.str() == generated)
      << "docs/metrics.md is stale: run tools/dev.sh metrics-doc and commit the result";
}

TEST(MetricsDocTest, ListsEveryServedFamilyOnce) {
  const std::string doc = RenderMetricsDoc();
  server::StatsSnapshot s;
  s.operations.push_back({"ping", 1, 0, {}});
  s.l2.emplace().adapters.emplace_back().type = "fs";
  s.parked.by_operation["wait_prefetch_status"];
  s.allocator.classes.push_back({4096, 1, 1, 1, 0});
  std::istringstream rendered(RenderPrometheus(s, {true, ""}, Phase::kServing));
  std::string line;
  int families = 0;
  while (std::getline(rendered, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    ++families;
    const std::string cell = "| `" + name + "` |";
    const auto first = doc.find(cell);
    EXPECT_NE(first, std::string::npos) << name << " is served but not in the doc";
    EXPECT_EQ(doc.find(cell, first + 1), std::string::npos) << name << " is listed twice";
  }
  EXPECT_GT(families, 100);
}

}  // namespace
}  // namespace lmcache::admin_http
