#include "admin_http/metrics_doc.h"

#include <map>
#include <set>
#include <vector>

#include "admin_http/prometheus.h"
#include "server/stats_schema.h"

namespace lmcache::admin_http {
namespace {

using stats::Field;
using stats::Group;

constexpr std::string_view kIntro = R"(# Metrics

<!-- Generated from the figure lists each component declares (stats/declare.h),
the reply's shape (src/server/stats_schema.cc) and src/admin_http/prometheus.cc
by `tools/dev.sh metrics-doc`; do not edit by hand: metrics_doc_test fails
when this file differs from what they say. -->

`GET /metrics` on the HTTP endpoint (`--http-host`, `--http-port`, default
127.0.0.1:8080) serves Prometheus text exposition (format 0.0.4) of the same
stats snapshot the msgpack `stats` operation returns: both are rendered from
one schema, so every field of the `stats` reply is a Prometheus sample and
the other way round (a few Prometheus gauges are derived from other fields,
and two are the HTTP endpoint's own state: their `stats` column says so). `GET /status` carries
the same tree as JSON under `stats`, the derived gauges included. Every metric is under the `lmcache_mp_`
prefix. Where the reference (LMCache MP mode, spec 15.5) has a metric that
means the same thing we use its name (marked **ref**); the rest are ours.
Labels are bounded: `operation` (the fixed operation table), `l2_name`
(an L2 adapter's `"name"`, or `<type>-<n>`, e.g. `fs-1`: one per adapter in
the cascade now, so adapters added and removed at runtime come and go),
`object_bytes` (the
L1 size classes), and the fixed values listed. No label carries a request,
key, model or tenant. Info gauges (`_info`, and `build_info`) are always 1
and carry a text as a label.

Units: `_bytes` bytes, `_seconds` seconds, `_ratio` a fraction in [0, 1];
counters end in `_total` and only grow while the server runs. Histograms are
microseconds in `stats` (`count`, `sum_us`, `buckets_us`: per bucket, upper
bounds 50 us to 10 s, then one for the rest) and seconds in Prometheus
(cumulative `_bucket{le}`, `_sum`, `_count`).
)";

constexpr std::string_view kScraping = R"(
## Scraping

```yaml
scrape_configs:
  - job_name: lmcache
    scrape_interval: 15s
    static_configs:
      - targets: ['127.0.0.1:8080']
```

`docs/grafana-dashboard.json` is a Grafana dashboard of these metrics
(import it and pick the Prometheus data source). `tests/integration/
prometheus_scrape_test.py` runs Debian's `prometheus` against the server and
`promtool check metrics` on its output.
)";

struct Row {
  std::string metric;
  std::string_view type;
  std::vector<std::string> labels;                       // from enclosing groups, in order
  std::map<std::string, std::vector<std::string>> fixed;  // a field's own label, with its values
  std::set<std::string> units;
  std::vector<std::string> fields;  // `stats` paths
  std::string help;
  bool reference = false;
  bool http_only = false;  // the HTTP endpoint's own state, not in `stats`
};

struct Section {
  std::string heading;
  std::vector<std::string> metrics;  // rows, in the order first named
};

std::string Code(std::string_view s) {
  std::string out = "`";
  return out.append(s).append("`");
}

class DocBuilder final : public stats::Visitor {
 public:
  DocBuilder() { sections_.push_back({"## Server", {}}); }

  void Field(const stats::Field& field, const stats::Value*) override {
    if (field.reach == stats::Reach::kElementLabel) return;
    const std::string metric = std::string(kMetricPrefix).append(field.metric);
    auto [it, inserted] = rows_.try_emplace(metric);
    Row& row = it->second;
    if (inserted) {
      row.metric = metric;
      row.type = stats::KindName(field.kind);
      row.labels = labels_;
      sections_[Current()].metrics.push_back(metric);
    }
    if (!field.label.name.empty()) {
      auto& values = row.fixed[std::string(field.label.name)];
      values.emplace_back(field.label.value);
    }
    if (field.kind == stats::Kind::kText) row.fixed[std::string(field.key)];
    if (!field.unit.empty()) row.units.emplace(field.unit);
    if (row.help.empty()) row.help = std::string(field.help);
    row.reference = row.reference || field.reference;
    row.fields.push_back(StatsPath(field));
  }
  void BeginGroup(const stats::Group& group) override {
    std::string path = path_.empty() ? std::string(group.key) : path_.back() + "." + std::string(group.key);
    if (group.form == stats::GroupForm::kArray) path += "[]";
    path_.push_back(path);
    if (groups_.size() < 2) {
      const std::string level = groups_.empty() ? "## " : "### ";
      std::string heading = level + std::string(group.title) + " (" + Code(path) + ")";
      sections_.push_back({heading, {}});
      section_of_depth_.push_back(sections_.size() - 1);
    } else {
      section_of_depth_.push_back(section_of_depth_.back());
    }
    groups_.push_back(&group);
  }
  void BeginElement(std::string_view) override {
    const stats::Group& group = *groups_.back();
    labels_.emplace_back(group.label);
    // A keyed map's elements sit under their label value; an array's under "[]".
    path_.push_back(group.form == stats::GroupForm::kKeyedMap
                        ? path_.back() + ".<" + std::string(group.label) + ">"
                        : path_.back());
  }
  void EndElement() override {
    labels_.pop_back();
    path_.pop_back();
  }
  void EndGroup() override {
    groups_.pop_back();
    path_.pop_back();
    section_of_depth_.pop_back();
  }
  void AbsentGroup(const stats::Group&) override {}

  void AddHttp(const HttpMetric& m) {
    const std::string metric = std::string(kMetricPrefix).append(m.name);
    Row& row = rows_[metric];
    row.metric = metric;
    row.type = "gauge";
    row.help = std::string(m.help);
    row.http_only = true;
    sections_[0].metrics.push_back(metric);
  }

  std::string Render() const {
    std::string out(kIntro);
    for (const Section& section : sections_) {
      if (section.metrics.empty()) continue;
      out += "\n" + section.heading + "\n\n";
      out += "| metric | type | labels | unit | `stats` field | meaning |\n";
      out += "|--------|------|--------|------|---------------|---------|\n";
      for (const std::string& metric : section.metrics) out += RowText(rows_.at(metric));
    }
    out += kScraping;
    return out;
  }

 private:
  std::size_t Current() const { return section_of_depth_.empty() ? 0 : section_of_depth_.back(); }

  std::string StatsPath(const stats::Field& field) const {
    if (field.reach == stats::Reach::kPrometheusOnly) return "";
    const std::string prefix = path_.empty() ? "" : path_.back() + ".";
    if (field.kind == stats::Kind::kHistogram && field.form == stats::HistogramForm::kFlat) {
      return prefix + std::string(field.key) + "_sum_us`, `" + prefix + std::string(field.key) +
             "_buckets_us";
    }
    return prefix + std::string(field.key);
  }

  static std::string RowText(const Row& row) {
    std::vector<std::string> labels;
    for (const std::string& l : row.labels) labels.push_back(Code(l));
    for (const auto& [name, values] : row.fixed) {
      std::string text = Code(name);
      for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : ": ") + values[i];
      labels.push_back(text);
    }
    std::vector<std::string> fields;
    for (const std::string& f : row.fields) {
      if (!f.empty()) fields.push_back(Code(f));
    }
    const std::string type = row.type == "info" ? "gauge (info)" : std::string(row.type);
    const std::string stats = row.http_only       ? "(HTTP only)"
                              : fields.empty()    ? "(derived)"
                                                  : Join(fields, ", ");
    return "| " + Code(row.metric) + " | " + type + " | " + Join(labels, "; ") + " | " +
           Join({row.units.begin(), row.units.end()}, ", ") + " | " + stats + " | " + row.help +
           (row.reference ? " — **ref**" : "") + " |\n";
  }

  static std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (i) out += sep;
      out += parts[i];
    }
    return out;
  }

  std::vector<Section> sections_;
  std::map<std::string, Row> rows_;
  std::vector<const stats::Group*> groups_;
  std::vector<std::string> path_;
  std::vector<std::string> labels_;
  std::vector<std::size_t> section_of_depth_;
};

}  // namespace

std::string RenderMetricsDoc() {
  DocBuilder doc;
  for (const HttpMetric& m : HttpMetrics()) doc.AddHttp(m);
  server::VisitStats(nullptr, doc);
  return doc.Render();
}

}  // namespace lmcache::admin_http
