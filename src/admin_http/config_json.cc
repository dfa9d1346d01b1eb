#include "admin_http/config_json.h"

#include "common/version.h"

namespace lmcache::admin_http {

using nlohmann::json;

json VersionJson() {
  return {{"version", kVersion},
          {"commit", kCommit},
          {"build",
           {{"type", kBuildType},
            {"sanitizers", kSanitizers},
            {"cuda", kBuiltWithCuda},
            {"io_uring", kBuiltWithIoUring},
            {"resp", kBuiltWithResp}}}};
}

json ConfigJson(const std::vector<FlagValue>& flags) {
  json out = json::object();
  for (const FlagValue& flag : flags) {
    json value = nullptr;
    if (flag.repeatable) {
      value = flag.values;
    } else if (!flag.values.empty()) {
      value = flag.values.back();  // the last occurrence wins, as CLI11 applies it
    }
    out[flag.name] = {{"value", std::move(value)}, {"given", flag.given}};
  }
  return {{"flags", std::move(out)}};
}

json AdaptersJson(const std::vector<std::string>& configs, const server::StatsSnapshot& snapshot) {
  json adapters = json::array();
  const std::size_t live = snapshot.l2 ? snapshot.l2->adapters.size() : 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    json config = json::parse(configs[i], nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) config = configs[i];  // shown as given
    json entry = {{"position", i + 1}, {"config", std::move(config)}};
    if (i < live) {
      const tier::L2AdapterStats& a = snapshot.l2->adapters[i];
      entry["type"] = a.type;
      entry["description"] = a.description;
      entry["condition"] = a.condition.empty() ? "ok" : a.condition;
      entry["objects"] = a.objects;
      entry["usage_bytes"] = a.usage_bytes;
      entry["capacity_bytes"] = a.capacity_bytes;
    }
    adapters.push_back(std::move(entry));
  }
  return {{"adapters", std::move(adapters)}};
}

}  // namespace lmcache::admin_http
