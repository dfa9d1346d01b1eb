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

}  // namespace lmcache::admin_http
