// The `resp` L2 adapter type: its `--l2-adapter` fields and its factory
// (registered through l2_adapter_types.h; src/CMakeLists.txt lists it).
#include "tier/resp/resp_adapter.h"

#include <memory>
#include <string>
#include <vector>

#include "tier/l2_config.h"
#include "tier/l2_config_fields.h"

namespace lmcache::tier {
namespace {

using nlohmann::json;

Result<std::vector<std::string>> Urls(L2ConfigFields& f) {
  if (!f.Has("url")) return f.Error("url", "is required: redis://host:port, a list of them, or unix:///path");
  const json& value = f.object()["url"];
  std::vector<std::string> urls;
  if (value.is_string()) {
    urls.push_back(value.get<std::string>());
  } else if (value.is_array() && !value.empty()) {
    for (const json& u : value) {
      if (!u.is_string()) return f.Error("url", "must be a string or a list of strings");
      urls.push_back(u.get<std::string>());
    }
  } else {
    return f.Error("url", "must be a string or a non-empty list of strings");
  }
  return urls;
}

Result<RespAdapterConfig> ParseResp(L2ConfigFields& f) {
  RespAdapterConfig c;
  LMC_ASSIGN_OR_RETURN(c.urls, Urls(f));
  for (const std::string& url : c.urls) {
    auto endpoint = ParseRespUrl(url, &c.credentials);
    if (!endpoint.ok()) return f.Error("url", endpoint.status().message());
  }
  LMC_ASSIGN_OR_RETURN(const std::string username, f.String("username", false));
  LMC_ASSIGN_OR_RETURN(const std::string password, f.String("password", false));
  if (f.Has("username")) c.credentials.username = username;
  if (f.Has("password")) c.credentials.password = password;
  if (!c.credentials.username.empty() && c.credentials.password.empty()) {
    return f.Error("username", "needs a password");
  }
  LMC_ASSIGN_OR_RETURN(const double db, f.Number("db", c.credentials.db, 0, 65535));
  c.credentials.db = static_cast<int>(db);
  LMC_ASSIGN_OR_RETURN(const std::string mode, f.String("mode", false));
  if (mode.empty() || mode == "auto") {
    c.mode = RespMode::kAuto;
  } else if (mode == "standalone") {
    c.mode = RespMode::kStandalone;
  } else if (mode == "cluster") {
    c.mode = RespMode::kCluster;
  } else {
    return f.Error("mode", "must be \"auto\", \"standalone\" or \"cluster\"");
  }
  if (c.mode == RespMode::kCluster && c.credentials.db != 0) {
    return f.Error("db", "a Redis Cluster has only database 0");
  }
  if (f.Has("key_prefix")) {
    LMC_ASSIGN_OR_RETURN(c.key_prefix, f.String("key_prefix", false));
    if (c.key_prefix.find_first_of("{}") != std::string::npos) {
      return f.Error("key_prefix", "must not contain '{' or '}' (they would change the hash slot)");
    }
  }
  LMC_ASSIGN_OR_RETURN(const double ttl, f.Number("ttl_seconds", 0, 0, 365.0 * 86400));
  c.ttl_seconds = static_cast<std::uint32_t>(ttl);
  LMC_ASSIGN_OR_RETURN(const double in_flight, f.Number("max_in_flight", 16, 1, 4096));
  c.max_in_flight = static_cast<std::uint32_t>(in_flight);
  LMC_ASSIGN_OR_RETURN(const double connect, f.Number("connect_timeout_ms", 1000, 1, 600'000));
  c.timeouts.connect = std::chrono::milliseconds(static_cast<long>(connect));
  LMC_ASSIGN_OR_RETURN(const double command, f.Number("command_timeout_ms", 5000, 1, 600'000));
  c.timeouts.command = std::chrono::milliseconds(static_cast<long>(command));
  LMC_ASSIGN_OR_RETURN(const double retry, f.Number("retry_interval_ms", 1000, 10, 600'000));
  c.retry_interval = std::chrono::milliseconds(static_cast<long>(retry));
  return c;
}

}  // namespace

void RegisterRespAdapterType(L2AdapterTypes& types) {
  types.Add(TypedL2AdapterType<RespAdapterConfig>(
      "resp", {"valkey"}, [](L2ConfigFields& f, L2AdapterSpec*) { return ParseResp(f); },
      [](const RespAdapterConfig& config) -> Result<std::unique_ptr<L2Adapter>> {
        LMC_ASSIGN_OR_RETURN(auto adapter, RespAdapter::Create(config));
        return std::unique_ptr<L2Adapter>(std::move(adapter));
      }));
}

}  // namespace lmcache::tier
