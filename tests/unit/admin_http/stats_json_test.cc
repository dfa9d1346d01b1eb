// The JSON stats tree (GET /status's "stats") is the msgpack `stats` reply,
// value for value, plus the figures the reply leaves to Prometheus: nothing
// differs, nothing is missing.
#include "admin_http/stats_json.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "fakes/populated_stats.h"
#include "server/stats_schema.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

// The keys of the fields only Prometheus gets from the reply.
class PrometheusOnlyKeys final : public stats::Visitor {
 public:
  void Field(const stats::Field& field, const stats::Value*) override {
    if (field.reach == stats::Reach::kPrometheusOnly) keys.insert(std::string(field.key));
  }
  void BeginGroup(const stats::Group&) override {}
  void BeginElement(std::string_view) override {}
  void EndElement() override {}
  void EndGroup() override {}
  void AbsentGroup(const stats::Group&) override {}
  std::set<std::string> keys;
};

void ExpectReplyPlusDerived(const server::StatsSnapshot& s) {
  PrometheusOnlyKeys derived;
  server::VisitStats(nullptr, derived);
  ASSERT_FALSE(derived.keys.empty());
  const json reply = json::from_msgpack(server::EncodeStatsMsgpack(s));
  const json tree = StatsJson(s);
  std::set<std::string> added;
  for (const json& op : json::diff(reply, tree)) {
    const std::string path = op["path"];
    EXPECT_EQ(op["op"], "add") << path << " differs from the reply: " << op.dump();
    added.insert(path.substr(path.rfind('/') + 1));
  }
  for (const std::string& key : added) EXPECT_TRUE(derived.keys.count(key)) << key;
  EXPECT_FALSE(added.empty());
}

TEST(StatsJsonTest, IsTheReplyPlusTheDerivedFigures) {
  ExpectReplyPlusDerived(testing::PopulatedStats(true));
}

TEST(StatsJsonTest, AServerWithoutL2HasNullL2) {
  const server::StatsSnapshot s = testing::PopulatedStats(false);
  ExpectReplyPlusDerived(s);
  EXPECT_TRUE(StatsJson(s)["l2"].is_null());
}

TEST(StatsJsonTest, ADerivedFigureHasItsValue) {
  server::StatsSnapshot s = testing::PopulatedStats(true);
  s.allocator.capacity_bytes = 200;
  s.allocator.used_bytes = 50;
  const json tree = StatsJson(s);
  EXPECT_DOUBLE_EQ(tree["l1"]["usage_ratio"].get<double>(), 0.25);
  EXPECT_EQ(tree["l2"]["prefetch"]["active_jobs"].get<std::uint64_t>(),
            s.l2->prefetch.in_flight + s.l2->prefetch.queued);
  EXPECT_EQ(tree["l2"]["adapters"][0]["healthy"], true);
  EXPECT_EQ(tree["l2"]["adapters"][1]["healthy"], false);
}

}  // namespace
}  // namespace lmcache::admin_http
