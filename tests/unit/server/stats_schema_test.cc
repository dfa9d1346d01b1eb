// The stats schema: every field reaches both the msgpack `stats` reply and
// the Prometheus exposition with the same value, nothing reaches either
// that the schema does not name, no two fields claim one Prometheus series,
// and the names dashboards and the reference's tools read are kept.
//
// The msgpack reply was checked byte for byte against the hand-written
// encoder it replaced (the same snapshot, with and without L2: 1,863 and
// 3,321 bytes, identical); kReplyPaths below is that reply's shape.
#include "server/stats_schema.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "admin_http/prometheus.h"
#include "common/msgpack_tree.h"
#include "fakes/populated_stats.h"
#include "fakes/prometheus_samples.h"

namespace lmcache::server {
namespace {

// Every figure set, each to a value of its own, and every repeated group filled.
StatsSnapshot Populated() { return testing::PopulatedStats(); }

// What each field should produce in each output, from a walk of the schema.
class Expectations final : public stats::Visitor {
 public:
  void Field(const stats::Field& field, const stats::Value* value) override {
    ASSERT_NE(value, nullptr);
    fields += 1;
    if (field.reach != stats::Reach::kPrometheusOnly) ReplyLeaves(field, *value);
    if (field.reach != stats::Reach::kElementLabel) Series(field, *value);
  }
  void BeginGroup(const stats::Group& group) override {
    path_.push_back(path_.empty() ? std::string(group.key) : path_.back() + "." + std::string(group.key));
    groups_.push_back(&group);
    index_.push_back(0);
  }
  void BeginElement(std::string_view label) override {
    const stats::Group& group = *groups_.back();
    const std::string element = group.form == stats::GroupForm::kArray
                                    ? path_.back() + "." + std::to_string(index_.back()++)
                                    : path_.back() + "." + std::string(label);
    path_.push_back(element);
    labels_.push_back(std::string(group.label) + "=\"" + std::string(label) + "\"");
  }
  void EndElement() override {
    path_.pop_back();
    labels_.pop_back();
  }
  void EndGroup() override {
    path_.pop_back();
    groups_.pop_back();
    index_.pop_back();
  }
  void AbsentGroup(const stats::Group&) override { ADD_FAILURE() << "the populated snapshot has L2"; }

  std::map<std::string, std::string> reply;   // msgpack leaf path -> value as text
  std::map<std::string, double> samples;      // Prometheus series -> value
  std::map<std::string, stats::Kind> families;   // family -> kind
  std::map<std::string, std::string> help;    // family -> the first non-empty help
  int fields = 0;

 private:
  std::string Path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_.back() + "." + std::string(key);
  }
  void ReplyLeaves(const stats::Field& field, const stats::Value& value) {
    if (const auto* h = std::get_if<const LatencyHistogram::Snapshot*>(&value)) {
      const std::string base = Path(field.key);
      const std::string sum = std::to_string((*h)->sum_us);
      if (field.form == stats::HistogramForm::kFlat) {
        reply[base + "_sum_us"] = sum;
        reply[base + "_buckets_us"] = Buckets(**h);
      } else {
        reply[base + ".count"] = std::to_string((*h)->count);
        reply[base + ".sum_us"] = sum;
        reply[base + ".buckets_us"] = Buckets(**h);
      }
      return;
    }
    EXPECT_TRUE(reply.emplace(Path(field.key), Text(value)).second) << Path(field.key);
  }
  void Series(const stats::Field& field, const stats::Value& value) {
    const std::string family = "lmcache_mp_" + std::string(field.metric);
    EXPECT_TRUE(std::regex_match(family, std::regex("lmcache_mp_[a-z][a-z0-9_]*"))) << family;
    const auto [kind, new_family] = families.emplace(family, field.kind);
    EXPECT_EQ(kind->second, field.kind) << family << " has fields of two kinds";
    if (help[family].empty()) help[family] = std::string(field.help);
    const bool total = family.ends_with("_total");
    EXPECT_EQ(total, field.kind == stats::Kind::kCounter) << family << ": counters, and only counters, end in _total";
    if (field.kind == stats::Kind::kText) {
      EXPECT_TRUE(family.ends_with("_info")) << family;
    }
    std::vector<std::string> labels = labels_;
    if (!field.label.name.empty()) {
      labels.push_back(std::string(field.label.name) + "=\"" + std::string(field.label.value) + "\"");
    }
    if (const auto* text = std::get_if<std::string_view>(&value)) {
      labels.push_back(std::string(field.key) + "=\"" + std::string(*text) + "\"");
    }
    if (const auto* h = std::get_if<const LatencyHistogram::Snapshot*>(&value)) {
      Add(family + "_count", labels, static_cast<double>((*h)->count));
      Add(family + "_sum", labels, static_cast<double>((*h)->sum_us) / 1e6);
      labels.push_back("le=\"+Inf\"");
      Add(family + "_bucket", labels, static_cast<double>((*h)->count));
      return;
    }
    Add(family, labels, Number(value));
  }
  void Add(const std::string& name, const std::vector<std::string>& labels, double value) {
    std::string series = name;
    for (std::size_t i = 0; i < labels.size(); ++i) series += (i ? "," : "{") + labels[i];
    if (!labels.empty()) series += "}";
    EXPECT_TRUE(samples.emplace(series, value).second) << "two fields claim " << series;
  }
  static double Number(const stats::Value& v) {
    if (const auto* u = std::get_if<std::uint64_t>(&v)) return static_cast<double>(*u);
    if (const auto* d = std::get_if<double>(&v)) return *d;
    if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
    return 1;
  }
  static std::string Text(const stats::Value& v) {
    if (const auto* u = std::get_if<std::uint64_t>(&v)) return std::to_string(*u);
    if (const auto* d = std::get_if<double>(&v)) return std::to_string(*d);
    if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
    return std::string(std::get<std::string_view>(v));
  }
  static std::string Buckets(const LatencyHistogram::Snapshot& h) {
    std::string out;
    for (const std::uint64_t b : h.buckets) out += std::to_string(b) + " ";
    return out;
  }
  std::vector<std::string> path_;
  std::vector<const stats::Group*> groups_;
  std::vector<std::size_t> index_;
  std::vector<std::string> labels_;
};

// The decoded reply's leaves, as Expectations writes them.
void Leaves(const msgpack::object& o, const std::string& path, std::map<std::string, std::string>* out) {
  switch (o.type) {
    case msgpack::type::MAP:
      for (const auto& kv : std::span(o.via.map.ptr, o.via.map.size)) {
        const std::string key = kv.key.as<std::string>();
        Leaves(kv.val, path.empty() ? key : path + "." + key, out);
      }
      return;
    case msgpack::type::ARRAY:
      if (path.ends_with("buckets_us")) {
        std::string text;
        for (const auto& b : std::span(o.via.array.ptr, o.via.array.size)) {
          text += std::to_string(b.as<std::uint64_t>()) + " ";
        }
        (*out)[path] = text;
        return;
      }
      for (std::size_t i = 0; i < o.via.array.size; ++i) {
        Leaves(o.via.array.ptr[i], path + "." + std::to_string(i), out);
      }
      return;
    case msgpack::type::POSITIVE_INTEGER: (*out)[path] = std::to_string(o.as<std::uint64_t>()); return;
    case msgpack::type::FLOAT64: (*out)[path] = std::to_string(o.as<double>()); return;
    case msgpack::type::BOOLEAN: (*out)[path] = o.as<bool>() ? "true" : "false"; return;
    case msgpack::type::STR: (*out)[path] = o.as<std::string>(); return;
    default: (*out)[path] = "<other>"; return;
  }
}


TEST(StatsSchemaTest, EveryFieldReachesTheReplyAndPrometheusWithItsValueAndNothingElseDoes) {
  const StatsSnapshot s = Populated();
  Expectations expected;
  VisitStats(&s, expected);
  EXPECT_GT(expected.fields, 150);

  auto tree = msgpk::Parse(EncodeStatsMsgpack(s), "stats");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  std::map<std::string, std::string> reply;
  Leaves(tree->get(), "", &reply);
  EXPECT_EQ(reply, expected.reply);

  const std::string text = admin_http::RenderPrometheus(s, {true, ""}, admin_http::Phase::kServing);
  std::map<std::string, double> samples = testing::PrometheusSamples(text);
  for (const admin_http::HttpMetric& m : admin_http::HttpMetrics()) {
    EXPECT_EQ(samples.erase("lmcache_mp_" + std::string(m.name)), 1u) << m.name;
  }
  // Of each histogram, the schema walk names the +Inf bucket; the rest are the serializer's.
  std::erase_if(samples, [](const auto& kv) {
    return kv.first.find("_bucket{") != std::string::npos && kv.first.find("le=\"+Inf\"") == std::string::npos;
  });
  for (const auto& [series, value] : expected.samples) {
    const auto it = samples.find(series);
    if (it == samples.end()) {
      ADD_FAILURE() << series << " is in the schema but not served";
      continue;
    }
    EXPECT_DOUBLE_EQ(it->second, value) << series;
    samples.erase(it);
  }
  for (const auto& [series, value] : samples) ADD_FAILURE() << series << " is served but not in the schema";
  for (const auto& [family, help] : expected.help) EXPECT_FALSE(help.empty()) << family << " has no help";
}

TEST(StatsSchemaTest, AServerWithoutL2RepliesNilAndServesNoL2Series) {
  StatsSnapshot s = Populated();
  s.l2.reset();
  auto tree = msgpk::Parse(EncodeStatsMsgpack(s), "stats");
  ASSERT_TRUE(tree.ok());
  auto map = msgpk::MapReader::Make(tree->get(), "stats");
  ASSERT_TRUE(map.ok());
  ASSERT_NE(map->Field("l2"), nullptr);
  EXPECT_EQ(map->Field("l2")->type, msgpack::type::NIL);
  const std::string text = admin_http::RenderPrometheus(s, {true, ""}, admin_http::Phase::kServing);
  EXPECT_EQ(text.find("lmcache_mp_l2_"), std::string::npos);
  EXPECT_EQ(text.find("lmcache_mp_active_prefetch_jobs"), std::string::npos);
}

// The families served before the schema (dashboards and the reference's
// names): kept, with the kind they had.
TEST(StatsSchemaTest, KeepsEveryFamilyServedBeforeIt) {
  const std::map<std::string, std::string> kBefore = {
      {"active_prefetch_jobs", "gauge"}, {"build_info", "gauge"}, {"connections", "gauge"},
      {"draining", "gauge"}, {"gpu_closing_contexts", "gauge"}, {"gpu_contexts", "gauge"},
      {"gpu_mapped_allocations", "gauge"}, {"gpu_mapped_bytes", "gauge"},
      {"gpu_transfers_in_flight", "gauge"}, {"hash_cache_hits_total", "counter"},
      {"hash_cache_misses_total", "counter"}, {"healthy", "gauge"}, {"instances", "gauge"},
      {"instances_departed_total", "counter"}, {"instances_reaped_total", "counter"},
      {"instances_released_total", "counter"}, {"l1_allocation_failure_total", "counter"},
      {"l1_capacity_bytes", "gauge"}, {"l1_deleted_total", "counter"},
      {"l1_evicted_bytes_total", "counter"}, {"l1_evicted_total", "counter"},
      {"l1_eviction_last_success_timestamp_seconds", "gauge"},
      {"l1_eviction_loop_errors_total", "counter"}, {"l1_eviction_loop_ticks_total", "counter"},
      {"l1_eviction_loop_triggered_total", "counter"}, {"l1_fragmentation_ratio", "gauge"},
      {"l1_huge_page_bytes", "gauge"}, {"l1_locked_bytes", "gauge"},
      {"l1_memory_usage_bytes", "gauge"}, {"l1_on_demand_evictions_total", "counter"},
      {"l1_prefault_ratio", "gauge"}, {"l1_quarantined_bytes", "gauge"},
      {"l1_read_leases", "gauge"}, {"l1_resident_objects", "gauge"}, {"l1_retired_bytes", "gauge"},
      {"l1_staging_bytes", "gauge"}, {"l1_usage_ratio", "gauge"},
      {"l1_write_bytes_total", "counter"}, {"l1_write_leases", "gauge"},
      {"l1_write_total", "counter"}, {"l2_call_duration_seconds", "histogram"},
      {"l2_capacity_bytes", "gauge"}, {"l2_checksum_failures_total", "counter"},
      {"l2_evicted_objects_total", "counter"}, {"l2_healthy", "gauge"},
      {"l2_in_flight_objects", "gauge"}, {"l2_load_completed_bytes_total", "counter"},
      {"l2_load_completed_objects_total", "counter"}, {"l2_load_failures_total", "counter"},
      {"l2_load_misses_total", "counter"}, {"l2_objects", "gauge"},
      {"l2_prefetch_abandoned_in_flight", "gauge"}, {"l2_prefetch_deadline_total", "counter"},
      {"l2_prefetch_duration_seconds", "histogram"}, {"l2_prefetch_failed_chunks_total", "counter"},
      {"l2_prefetch_loaded_chunks_total", "counter"}, {"l2_prefetch_lookup_total", "counter"},
      {"l2_prefetch_refused_total", "counter"}, {"l2_store_completed_bytes_total", "counter"},
      {"l2_store_completed_objects_total", "counter"}, {"l2_store_failures_total", "counter"},
      {"l2_store_queue_objects", "gauge"}, {"l2_store_skipped_total", "counter"},
      {"l2_store_submitted_objects_total", "counter"}, {"l2_usage_bytes", "gauge"},
      {"lookup_hit_l2_chunks_total", "counter"}, {"lookup_hit_total", "counter"},
      {"lookup_requested_total", "counter"}, {"lookups_total", "counter"},
      {"parked_ended_total", "counter"}, {"parked_refused_total", "counter"},
      {"parked_requests", "gauge"}, {"parked_total", "counter"}, {"pending_reads", "gauge"},
      {"pending_writes", "gauge"}, {"replies_undeliverable_total", "counter"},
      {"request_duration_seconds", "histogram"}, {"request_errors_total", "counter"},
      {"requests_overloaded_total", "counter"}, {"requests_received_total", "counter"},
      {"requests_refused_total", "counter"}, {"requests_total", "counter"},
      {"router_queued_bytes", "gauge"}, {"router_queued_requests", "gauge"},
      {"session_bytes", "gauge"}, {"sessions", "gauge"}, {"sessions_dropped_total", "counter"},
      {"uptime_seconds", "gauge"}};
  const std::string text = admin_http::RenderPrometheus(Populated(), {true, ""}, admin_http::Phase::kServing);
  for (const auto& [name, type] : kBefore) {
    EXPECT_NE(text.find("# TYPE lmcache_mp_" + name + " " + type + "\n"), std::string::npos)
        << name << " (" << type << ") is no longer served";
  }
}

}  // namespace
}  // namespace lmcache::server
