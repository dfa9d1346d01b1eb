#include "admin_http/stats_json.h"

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "server/stats_schema.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

json Buckets(const LatencyHistogram::Snapshot& h) {
  return json(std::vector<std::uint64_t>(h.buckets.begin(), h.buckets.end()));
}

class JsonWriter final : public stats::Visitor {
 public:
  JsonWriter() { frames_.push_back({nullptr, json::object(), {}}); }

  void Field(const stats::Field& field, const stats::Value* value) override {
    json& out = frames_.back().node;
    const std::string key(field.key);
    if (const auto* h = std::get_if<const LatencyHistogram::Snapshot*>(value)) {
      if (field.form == stats::HistogramForm::kFlat) {
        out[key + "_sum_us"] = (*h)->sum_us;
        out[key + "_buckets_us"] = Buckets(**h);
        return;
      }
      out[key] = {{"count", (*h)->count}, {"sum_us", (*h)->sum_us}, {"buckets_us", Buckets(**h)}};
      return;
    }
    std::visit(
        [&out, &key](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string_view>) {
            out[key] = std::string(v);
          } else if constexpr (!std::is_pointer_v<V>) {
            out[key] = v;
          }
        },
        *value);
  }
  void BeginGroup(const stats::Group& group) override {
    frames_.push_back(
        {&group, group.form == stats::GroupForm::kArray ? json::array() : json::object(), {}});
  }
  void BeginElement(std::string_view label_value) override {
    frames_.push_back({nullptr, json::object(), std::string(label_value)});
  }
  void EndElement() override {
    Frame element = Pop();
    Frame& group = frames_.back();
    if (group.group->form == stats::GroupForm::kArray) {
      group.node.push_back(std::move(element.node));
    } else {
      group.node[element.label] = std::move(element.node);
    }
  }
  void EndGroup() override {
    Frame group = Pop();
    frames_.back().node[std::string(group.group->key)] = std::move(group.node);
  }
  void AbsentGroup(const stats::Group& group) override {
    frames_.back().node[std::string(group.key)] = nullptr;
  }

  json Take() { return std::move(frames_.front().node); }

 private:
  struct Frame {
    const stats::Group* group;  // null for an element (and the root)
    json node;
    std::string label;  // an element's label value
  };
  Frame Pop() {
    Frame top = std::move(frames_.back());
    frames_.pop_back();
    return top;
  }
  std::vector<Frame> frames_;
};

}  // namespace

json StatsJson(const server::StatsSnapshot& stats) {
  JsonWriter writer;
  server::VisitStats(&stats, writer);
  return writer.Take();
}

}  // namespace lmcache::admin_http
