// The vocabulary every figure of the server is described in: what a field
// is (its key, kind, unit, Prometheus family, help), how its value is read
// from the stats struct it belongs to (a Row), how fields group into maps
// and repeated elements, and the Visitor every exporter implements (the
// msgpack `stats` reply, Prometheus, docs/metrics.md, /status).
//
// A component declares its figures once, as a list (stats/declare.h) next
// to its code; the list generates the struct, the atomic counters where it
// counts, and the Rows here. The server arranges the components' rows into
// its reply (server/stats_schema.cc) and walks them.
//
// Thread-safety: plain values and immutable tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "common/histogram.h"

namespace lmcache::stats {

enum class Kind : std::uint8_t {
  kCounter,    // only grows while the server runs
  kGauge,      // a level now
  kHistogram,  // a LatencyHistogram (microseconds in msgpack, seconds in Prometheus)
  kText,       // a string; in Prometheus an info gauge of 1 carrying it as a label named `key`
};
std::string_view KindName(Kind kind);  // "counter", "gauge", "histogram", "info"

// Where a field shows.
enum class Reach : std::uint8_t {
  kEverywhere,      // the msgpack reply and Prometheus
  kPrometheusOnly,  // derived from other fields for dashboards (a ratio, a sum)
  kElementLabel,    // msgpack; in Prometheus the label its group's elements carry
};

// How a histogram is written in msgpack: a map {count, sum_us, buckets_us}
// under its key, or (kFlat, the per-operation rows) `<key>_sum_us` and
// `<key>_buckets_us` beside the row's own count.
enum class HistogramForm : std::uint8_t { kMap, kFlat };

struct Label {
  std::string_view name;
  std::string_view value;
};

// The optional tail of a Field, spelt in the lists as these names.
inline constexpr Reach kEverywhere = Reach::kEverywhere;
inline constexpr Reach kPrometheusOnly = Reach::kPrometheusOnly;
inline constexpr Reach kElementLabel = Reach::kElementLabel;
inline constexpr HistogramForm kMapForm = HistogramForm::kMap;
inline constexpr HistogramForm kFlatForm = HistogramForm::kFlat;
inline constexpr bool kReference = true;  // the reference exports a metric of this name and meaning

// What one field is; the same for every exporter.
struct Field {
  std::string_view key;     // the msgpack field within its map
  Kind kind;
  std::string_view unit;    // for the docs: "bytes", "objects", "seconds", ...
  std::string_view metric;  // Prometheus family, after the `lmcache_mp_` prefix
  std::string_view help;    // the family's HELP line and the docs' meaning
  Label label{};            // a fixed label telling this field apart within its family
  Reach reach = Reach::kEverywhere;
  HistogramForm form = HistogramForm::kMap;
  bool reference = false;   // the reference (LMCache MP) exports a metric of this name and meaning
};

// A field's value; texts and histograms by pointer into the struct read.
using Value =
    std::variant<std::uint64_t, double, bool, std::string_view, const LatencyHistogram::Snapshot*>;

inline Value ValueOf(std::uint64_t v) { return Value(std::in_place_type<std::uint64_t>, v); }
inline Value ValueOf(double v) { return Value(std::in_place_type<double>, v); }
inline Value ValueOf(bool v) { return Value(std::in_place_type<bool>, v); }
inline Value ValueOf(const std::string& v) {
  return Value(std::in_place_type<std::string_view>, v);
}
inline Value ValueOf(const LatencyHistogram::Snapshot& v) { return Value(&v); }

// One field and how to read it from a `T`.
template <class T>
struct Row {
  Field field;
  Value (*get)(const T&);
};

// A map of fields, or a repeated group of them.
enum class GroupForm : std::uint8_t {
  kMap,       // one map under `key`
  kKeyedMap,  // a map under `key` from each element's label value to its map
  kArray,     // an array under `key` of the elements' maps
};

struct Group {
  std::string_view key;    // its msgpack key
  GroupForm form;
  std::string_view label;  // kKeyedMap / kArray: the Prometheus label each element carries
  std::string_view title;  // for the docs: what the group is
};

class Visitor {
 public:
  virtual ~Visitor() = default;
  // `value` is null in a schema walk.
  virtual void Field(const stats::Field& field, const Value* value) = 0;
  virtual void BeginGroup(const Group& group) = 0;
  // One element of a kKeyedMap or kArray group; `label_value` is "<label>" in a schema walk.
  virtual void BeginElement(std::string_view label_value) = 0;
  virtual void EndElement() = 0;
  virtual void EndGroup() = 0;
  // An optional group the snapshot lacks (no L2 tier).
  virtual void AbsentGroup(const Group& group) = 0;
};

}  // namespace lmcache::stats
