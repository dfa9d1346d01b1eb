#include "admin_http/memory_pressure.h"

#include <algorithm>
#include <string>

#include "stats/ratio.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

json OrNull(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }

// One tier's entry; the fields and their order are the reference's MemoryTierPressure.
struct TierUsage {
  std::string_view tier;  // "l1" or "l2"
  std::optional<std::size_t> adapter_id;
  std::optional<std::string> backend_type;
  std::uint64_t used_bytes = 0;
  std::uint64_t capacity_bytes = 0;  // 0: not bounded or not known
  std::optional<double> trigger_watermark;
  std::optional<std::string> eviction_policy;
  std::string condition;  // empty when healthy
};

json TierJson(const TierUsage& t, PressureLevel* level) {
  const std::optional<std::uint64_t> capacity =
      t.capacity_bytes > 0 ? std::optional<std::uint64_t>(t.capacity_bytes) : std::nullopt;
  *level = ClassifyPressure(t.used_bytes, capacity, t.trigger_watermark);
  json errors = json::array();
  if (!t.condition.empty()) errors.push_back(t.condition);
  return {{"tier", t.tier},
          {"adapter_id", t.adapter_id ? json(*t.adapter_id) : json(nullptr)},
          {"backend_type", t.backend_type ? json(*t.backend_type) : json(nullptr)},
          {"used_bytes", t.used_bytes},
          {"capacity_bytes", capacity ? json(*capacity) : json(nullptr)},
          {"used_ratio", OrNull(stats::UsedRatio(t.used_bytes, t.capacity_bytes))},
          {"trigger_watermark", OrNull(t.trigger_watermark)},
          {"eviction_policy", t.eviction_policy ? json(*t.eviction_policy) : json(nullptr)},
          {"health", t.condition.empty() ? "ok" : "failed"},
          {"level", PressureLevelName(*level)},
          {"collection_errors", errors}};
}

}  // namespace

std::string_view PressureLevelName(PressureLevel level) {
  switch (level) {
    case PressureLevel::kNormal: return "normal";
    case PressureLevel::kHigh: return "high";
    case PressureLevel::kCritical: return "critical";
    case PressureLevel::kUnknown: break;
  }
  return "unknown";
}

PressureLevel ClassifyPressure(std::optional<std::uint64_t> used_bytes,
                               std::optional<std::uint64_t> capacity_bytes,
                               std::optional<double> trigger_watermark) {
  if (!used_bytes || !capacity_bytes) return PressureLevel::kUnknown;
  const std::optional<double> used = stats::UsedRatio(*used_bytes, *capacity_bytes);
  if (!used) return PressureLevel::kUnknown;
  const double ratio = *used;
  if (ratio >= 1.0) return PressureLevel::kCritical;
  if (trigger_watermark && ratio >= *trigger_watermark) return PressureLevel::kHigh;
  return PressureLevel::kNormal;
}

json MemoryPressureJson(const server::ServerStatus& status, std::int64_t timestamp_ms) {
  std::vector<TierUsage> usages;
  const server::StatsSnapshot& s = status.stats;
  usages.push_back({"l1", std::nullopt, std::nullopt, s.allocator.used_bytes,
                    s.allocator.capacity_bytes, status.eviction_trigger_watermark,
                    status.eviction_policy, ""});
  if (s.l2) {
    for (std::size_t i = 0; i < s.l2->adapters.size(); ++i) {
      const tier::L2AdapterStats& a = s.l2->adapters[i];
      // A bounded adapter (fs) evicts least recently used objects when a
      // write would pass its capacity: no watermark below that.
      usages.push_back({"l2", i, a.type, a.usage_bytes, a.capacity_bytes, std::nullopt,
                        a.capacity_bytes > 0 ? std::optional<std::string>("LRU") : std::nullopt,
                        a.condition});
    }
  }
  json tiers = json::array();
  std::optional<PressureLevel> overall;
  bool complete = true;
  for (const TierUsage& usage : usages) {
    PressureLevel level = PressureLevel::kUnknown;
    tiers.push_back(TierJson(usage, &level));
    if (level == PressureLevel::kUnknown) {
      complete = false;
    } else {
      overall = std::max(overall.value_or(level), level);
    }
  }
  return {{"instance_id", status.instance_id},
          {"timestamp_ms", timestamp_ms},
          {"overall_level", PressureLevelName(overall.value_or(PressureLevel::kUnknown))},
          {"complete", complete},
          {"tiers", tiers}};
}

}  // namespace lmcache::admin_http
