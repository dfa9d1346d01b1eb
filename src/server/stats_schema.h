// The stats schema: one table of field descriptors (key, kind, unit, help,
// Prometheus family and labels, accessor) from which every exporter renders
// the StatsSnapshot: the msgpack `stats` reply (stats.cc), the Prometheus
// exposition (admin_http/prometheus.cc) and docs/metrics.md
// (admin_http/metrics_doc.cc). A field is added once, here, and reaches all
// three; stats_schema_test fails when a field would reach one and not the
// other, or two fields would claim the same Prometheus series.
//
// VisitStats walks the table in reply order and hands each field to a
// visitor with its value; with no snapshot it walks the schema alone (each
// repeated group once, without values), which is how the docs are made.
//
// Thread-safety: the table is immutable; VisitStats is a pure function of
// its snapshot.
#pragma once

#include <cstdint>
#include <string_view>
#include <variant>

#include "common/histogram.h"
#include "server/stats.h"

namespace lmcache::server {

enum class StatKind : std::uint8_t {
  kCounter,    // only grows while the server runs
  kGauge,      // a level now
  kHistogram,  // a LatencyHistogram (microseconds in msgpack, seconds in Prometheus)
  kText,       // a string; in Prometheus an info gauge of 1 carrying it as a label named `key`
};
std::string_view StatKindName(StatKind kind);  // "counter", "gauge", "histogram", "info"

// Where a field shows.
enum class StatReach : std::uint8_t {
  kEverywhere,      // the msgpack reply and Prometheus
  kPrometheusOnly,  // derived from other fields for dashboards (a ratio, a sum)
  kElementLabel,    // msgpack; in Prometheus the label its group's elements carry
};

// How a histogram is written in msgpack: a map {count, sum_us, buckets_us}
// under its key, or (kFlat, the per-operation rows) `<key>_sum_us` and
// `<key>_buckets_us` beside the row's own count.
enum class HistogramForm : std::uint8_t { kMap, kFlat };

struct StatLabel {
  std::string_view name;
  std::string_view value;
};

// What one field is; the same for every exporter.
struct StatField {
  std::string_view key;     // the msgpack field within its map
  StatKind kind;
  std::string_view unit;    // for the docs: "bytes", "objects", "seconds", ...
  std::string_view metric;  // Prometheus family, after the `lmcache_mp_` prefix
  std::string_view help;    // the family's HELP line and the docs' meaning
  StatLabel label{};        // a fixed label telling this field apart within its family
  StatReach reach = StatReach::kEverywhere;
  HistogramForm form = HistogramForm::kMap;
  bool reference = false;   // the reference (LMCache MP) exports a metric of this name and meaning
};

// A field's value; histograms by pointer into the snapshot.
using StatValue =
    std::variant<std::uint64_t, double, bool, std::string_view, const LatencyHistogram::Snapshot*>;

// A map of fields, or a repeated group of them.
enum class GroupForm : std::uint8_t {
  kMap,       // one map under `key`
  kKeyedMap,  // a map under `key` from each element's label value to its map
  kArray,     // an array under `key` of the elements' maps
};

struct StatGroup {
  std::string_view key;    // its msgpack key
  GroupForm form;
  std::string_view label;  // kKeyedMap / kArray: the Prometheus label each element carries
  std::string_view title;  // for the docs: what the group is
};

class StatsVisitor {
 public:
  virtual ~StatsVisitor() = default;
  // `value` is null in a schema walk.
  virtual void Field(const StatField& field, const StatValue* value) = 0;
  virtual void BeginGroup(const StatGroup& group) = 0;
  // One element of a kKeyedMap or kArray group; `label_value` is "<label>" in a schema walk.
  virtual void BeginElement(std::string_view label_value) = 0;
  virtual void EndElement() = 0;
  virtual void EndGroup() = 0;
  // An optional group the snapshot lacks (no L2 tier).
  virtual void AbsentGroup(const StatGroup& group) = 0;
};

// Walks `stats` (or, if null, the schema alone) in reply order.
void VisitStats(const StatsSnapshot* stats, StatsVisitor& visitor);

}  // namespace lmcache::server
