#include "admin_http/prometheus.h"

#include <prometheus/collectable.h>
#include <prometheus/text_serializer.h>

#include <limits>
#include <map>
#include <sstream>
#include <vector>

#include "server/stats_schema.h"

namespace lmcache::admin_http {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using stats::Field;
using stats::Kind;
using stats::Value;

MetricType TypeOf(stats::Kind kind) {
  switch (kind) {
    case stats::Kind::kCounter: return MetricType::Counter;
    case stats::Kind::kHistogram: return MetricType::Histogram;
    case stats::Kind::kGauge:
    case stats::Kind::kText: return MetricType::Gauge;
  }
  return MetricType::Untyped;
}

double AsNumber(const stats::Value& value) {
  if (const auto* u = std::get_if<std::uint64_t>(&value)) return static_cast<double>(*u);
  if (const auto* d = std::get_if<double>(&value)) return *d;
  if (const auto* b = std::get_if<bool>(&value)) return *b ? 1 : 0;
  return 1;  // text: an info gauge
}

// A LatencyHistogram (microsecond buckets, each its own count) in seconds, cumulative.
ClientMetric::Histogram Seconds(const LatencyHistogram::Snapshot& h) {
  ClientMetric::Histogram out;
  out.sample_count = h.count;
  out.sample_sum = static_cast<double>(h.sum_us) / 1e6;
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.buckets.size(); ++i) {
    cumulative += h.buckets[i];
    const double bound = i < LatencyHistogram::kBoundsUs.size()
                             ? static_cast<double>(LatencyHistogram::kBoundsUs[i]) / 1e6
                             : std::numeric_limits<double>::infinity();
    out.bucket.push_back({cumulative, bound});
  }
  return out;
}

// Turns a walk of the snapshot into metric families, each family's samples
// together and the families in the order the schema first names them.
class FamilyBuilder final : public stats::Visitor {
 public:
  void Field(const stats::Field& field, const stats::Value* value) override {
    if (value == nullptr || field.reach == stats::Reach::kElementLabel) return;
    ClientMetric metric;
    metric.label = labels_;
    if (!field.label.name.empty()) {
      metric.label.push_back({std::string(field.label.name), std::string(field.label.value)});
    }
    if (const auto* text = std::get_if<std::string_view>(value)) {
      metric.label.push_back({std::string(field.key), std::string(*text)});
    }
    switch (field.kind) {
      case stats::Kind::kCounter: metric.counter.value = AsNumber(*value); break;
      case stats::Kind::kGauge:
      case stats::Kind::kText: metric.gauge.value = AsNumber(*value); break;
      case stats::Kind::kHistogram:
        if (const auto* h = std::get_if<const LatencyHistogram::Snapshot*>(value)) {
          metric.histogram = Seconds(**h);
        }
        break;
    }
    Family(field).metric.push_back(std::move(metric));
  }
  void BeginGroup(const stats::Group& group) override { groups_.push_back(&group); }
  void BeginElement(std::string_view label_value) override {
    labels_.push_back({std::string(groups_.back()->label), std::string(label_value)});
  }
  void EndElement() override { labels_.pop_back(); }
  void EndGroup() override { groups_.pop_back(); }
  void AbsentGroup(const stats::Group&) override {}

  // A gauge of the HTTP endpoint's own, without labels.
  void Add(const std::string& name, const std::string& help, double value) {
    ClientMetric metric;
    metric.gauge.value = value;
    MetricFamily& family = families_.emplace_back();
    family.name = std::string(kMetricPrefix) + name;
    family.help = help;
    family.type = MetricType::Gauge;
    family.metric.push_back(std::move(metric));
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  MetricFamily& Family(const stats::Field& field) {
    const std::string name = std::string(kMetricPrefix).append(field.metric);
    auto [it, inserted] = index_.try_emplace(name, families_.size());
    if (inserted) {
      MetricFamily& family = families_.emplace_back();
      family.name = name;
      family.type = TypeOf(field.kind);
    }
    MetricFamily& family = families_[it->second];
    if (family.help.empty()) family.help = std::string(field.help);
    return family;
  }

  std::vector<const stats::Group*> groups_;
  std::vector<ClientMetric::Label> labels_;
  std::vector<MetricFamily> families_;
  std::map<std::string, std::size_t> index_;
};

// The snapshot, with the HTTP endpoint's own state, as prometheus-cpp's Collectable.
class SnapshotCollectable final : public prometheus::Collectable {
 public:
  SnapshotCollectable(const server::StatsSnapshot& stats, const HealthVerdict& health, Phase phase)
      : stats_(stats), health_(health), phase_(phase) {}
  std::vector<MetricFamily> Collect() const override {
    FamilyBuilder builder;
    for (const HttpMetric& m : HttpMetrics()) {
      builder.Add(std::string(m.name), std::string(m.help), m.value(health_, phase_));
    }
    server::VisitStats(&stats_, builder);
    return builder.Take();
  }

 private:
  const server::StatsSnapshot& stats_;
  const HealthVerdict& health_;
  Phase phase_;
};

}  // namespace

std::span<const HttpMetric> HttpMetrics() {
  static const HttpMetric kMetrics[] = {
      {"healthy", "1 when /healthcheck answers 200.",
       [](const HealthVerdict& health, Phase) { return health.healthy ? 1.0 : 0.0; }},
      {"draining", "1 while the server drains before it exits (after SIGTERM).",
       [](const HealthVerdict&, Phase phase) { return phase == Phase::kDraining ? 1.0 : 0.0; }},
  };
  return kMetrics;
}

std::string RenderPrometheus(const server::StatsSnapshot& s, const HealthVerdict& health,
                             Phase phase) {
  const SnapshotCollectable collectable(s, health, phase);
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, collectable.Collect());
  return out.str();
}

}  // namespace lmcache::admin_http
