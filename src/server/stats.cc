#include "server/stats.h"

#include <string>
#include <vector>

#include "common/msgpack_codec.h"
#include "server/stats_schema.h"

namespace lmcache::server {
namespace {

void WriteBuckets(msgpk::Encoder& out, const LatencyHistogram::Snapshot& h) {
  msgpk::Encoder buckets;
  for (const std::uint64_t n : h.buckets) buckets.Uint(n);
  out.Array(static_cast<std::uint32_t>(h.buckets.size())).Raw(buckets.bytes());
}

// Writes the schema's fields as nested msgpack maps and arrays.
class MsgpackWriter final : public stats::Visitor {
 public:
  MsgpackWriter() { frames_.emplace_back(); }

  void Field(const stats::Field& field, const stats::Value* value) override {
    if (field.reach == stats::Reach::kPrometheusOnly || value == nullptr) return;
    msgpk::MapWriter& m = frames_.back().map;
    if (const auto* h = std::get_if<const LatencyHistogram::Snapshot*>(value)) {
      const std::string key(field.key);
      if (field.form == stats::HistogramForm::kFlat) {
        m.Field(key + "_sum_us").Uint((*h)->sum_us);
        WriteBuckets(m.Field(key + "_buckets_us"), **h);
        return;
      }
      msgpk::MapWriter hm;
      hm.Field("count").Uint((*h)->count);
      hm.Field("sum_us").Uint((*h)->sum_us);
      WriteBuckets(hm.Field("buckets_us"), **h);
      m.Field(key).Raw(hm.Take());
      return;
    }
    msgpk::Encoder& out = m.Field(field.key);
    std::visit(
        [&out](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::uint64_t>) out.Uint(v);
          if constexpr (std::is_same_v<V, double>) out.Float(v);
          if constexpr (std::is_same_v<V, bool>) out.Bool(v);
          if constexpr (std::is_same_v<V, std::string_view>) out.Str(v);
        },
        *value);
  }
  void BeginGroup(const stats::Group& group) override {
    frames_.push_back({&group, {}, {}, 0, {}});
  }
  void BeginElement(std::string_view label_value) override {
    frames_.push_back({nullptr, {}, {}, 0, std::string(label_value)});
  }
  void EndElement() override {
    Frame element = Pop();
    Frame& group = frames_.back();
    if (group.group->form == stats::GroupForm::kArray) {
      group.items.Raw(element.map.Take());
      group.count += 1;
    } else {
      group.map.Field(element.label).Raw(element.map.Take());
    }
  }
  void EndGroup() override {
    Frame group = Pop();
    msgpk::Encoder& out = frames_.back().map.Field(group.group->key);
    if (group.group->form == stats::GroupForm::kArray) {
      out.Array(group.count).Raw(group.items.bytes());
    } else {
      out.Raw(group.map.Take());
    }
  }
  void AbsentGroup(const stats::Group& group) override { frames_.back().map.Field(group.key).Nil(); }

  std::string Take() { return frames_.front().map.Take(); }

 private:
  struct Frame {
    const stats::Group* group;  // null for an element
    msgpk::MapWriter map;       // a map group's or an element's fields, or a keyed map's elements
    msgpk::Encoder items;       // an array group's elements
    std::uint32_t count;
    std::string label;       // an element's label value
  };
  Frame Pop() {
    Frame top = std::move(frames_.back());
    frames_.pop_back();
    return top;
  }
  std::vector<Frame> frames_;
};

}  // namespace

std::string EncodeStatsMsgpack(const StatsSnapshot& s) {
  MsgpackWriter writer;
  VisitStats(&s, writer);
  return writer.Take();
}

LMC_STATS_ROWS(OperationStatRows, OperationStats, LMC_OPERATION_STATS)

LMC_STATS_ROWS(RestartStatRows, RestartStats, LMC_RESTART_STATS)

LMC_STATS_ROWS(ServiceStatRows, StatsSnapshot, LMC_SERVICE_STATS)

LMC_STATS_ROWS(ServiceCountedStatRows, StatsSnapshot, LMC_SERVICE_COUNTED_STATS)

LMC_STATS_ROWS(ReleasedStatRows, StatsSnapshot, LMC_RELEASED_STATS)

}  // namespace lmcache::server
