#include "admin_http/adapter_routes.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "admin_http/route_helpers.h"
#include "common/mask_secrets.h"
#include "tier/l2_tier.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

constexpr double kDefaultDrainSeconds = 30;
constexpr double kMaxDrainSeconds = 600;

const char* kNoTier =
    "this server was started without an L2 tier: start it with at least one --l2-adapter, "
    "then adapters can be added and removed at runtime";

// `?position=N` (1-based) as a 0-based position; nullopt when absent.
Result<std::optional<std::size_t>> PositionOf(const httplib::Request& req) {
  if (!req.has_param("position")) return std::optional<std::size_t>();
  const std::string text = req.get_param_value("position");
  std::size_t position = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), position);
  if (error != std::errc() || end != text.data() + text.size() || position == 0) {
    return InvalidArgument("position must be a whole number from 1 (the first adapter), got '" +
                           text + "'");
  }
  return std::optional<std::size_t>(position - 1);
}

Result<std::chrono::milliseconds> DrainTimeoutOf(const httplib::Request& req) {
  if (!req.has_param("drain_timeout_s")) {
    return std::chrono::milliseconds(static_cast<std::int64_t>(kDefaultDrainSeconds * 1000));
  }
  const std::string text = req.get_param_value("drain_timeout_s");
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(seconds >= 0) ||
      seconds > kMaxDrainSeconds) {
    return InvalidArgument("drain_timeout_s must be a number of seconds in [0, 600], got '" + text +
                           "'");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

// An fs adapter added at runtime writes and deletes in its base_path as the
// server's user: only under the operator's --l2-fs-root (symbolic links
// resolved, so a link inside the root cannot lead out of it).
Status CheckFsRoot(const tier::L2AdapterSpec& spec, const std::string& root) {
  if (spec.type != "fs") return Status::Ok();
  if (root.empty()) {
    return Status(ErrorCode::kPermissionDenied,
                  "fs adapters are added at runtime only under --l2-fs-root, which this server "
                  "was not given: restart it with --l2-fs-root DIR, or give the adapter as "
                  "--l2-adapter at start");
  }
  const auto config = nlohmann::json::parse(spec.source, nullptr, /*allow_exceptions=*/false);
  const std::string base = config.is_object() && config.contains("base_path") &&
                                   config["base_path"].is_string()
                               ? config["base_path"].get<std::string>()
                               : std::string();
  std::error_code error;
  const std::filesystem::path real_root = std::filesystem::weakly_canonical(root, error);
  const std::filesystem::path real_base = std::filesystem::weakly_canonical(base, error);
  const auto [root_end, base_at] =
      std::mismatch(real_root.begin(), real_root.end(), real_base.begin(), real_base.end());
  if (base.empty() || error || root_end != real_root.end() || real_base == real_root) {
    return Status(ErrorCode::kPermissionDenied,
                  "base_path '" + base + "' is not inside --l2-fs-root " + root +
                      " (as resolved: " + real_base.string() + "): give a directory under it");
  }
  return Status::Ok();
}

void AddAdapter(const httplib::Request& req, httplib::Response& res, tier::L2Tier& l2,
                const std::function<server::StatsSnapshot()>& snapshot,
                const std::string& fs_root) {
  auto position = PositionOf(req);
  if (!position.ok()) return Error(res, 400, position.status().message());
  auto spec = tier::ParseL2AdapterSpecAt(req.body, "POST /config/adapters");
  if (!spec.ok()) return Error(res, 400, spec.status().message());
  if (Status inside = CheckFsRoot(*spec, fs_root); !inside.ok()) {
    return Error(res, 403, inside.message());
  }
  auto name = l2.AddAdapter(*spec, *position);
  if (!name.ok()) return Error(res, HttpStatusOf(name.status()), name.status().message());
  spdlog::warn("L2 adapter {} added over HTTP: {}", *name, MaskSecrets(req.body));
  const json all = AdaptersJson(l2.cascade().Current(), {}, snapshot());
  for (const json& entry : all["adapters"]) {
    if (entry["name"] == *name) return Reply(res, 201, entry);
  }
  // Removed again between the two lines above: it was added all the same.
  Reply(res, 201, {{"name", *name}});
}

void RemoveAdapter(const httplib::Request& req, httplib::Response& res, tier::L2Tier& l2) {
  auto timeout = DrainTimeoutOf(req);
  if (!timeout.ok()) return Error(res, 400, timeout.status().message());
  const std::string name = req.matches[1];
  const auto started = std::chrono::steady_clock::now();
  auto removal = l2.RemoveAdapter(name, *timeout);
  if (!removal.ok()) return Error(res, HttpStatusOf(removal.status()), removal.status().message());
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  const bool drained = removal->drained == tier::L2Cascade::Drained::kDrained;
  spdlog::warn("L2 adapter {} ({}) removed over HTTP: {} after {} ms", removal->name,
               removal->description, drained ? "drained and closed" : "still draining",
               waited.count());
  Reply(res, drained ? 200 : 202,
        {{"name", removal->name},
         {"description", removal->description},
         {"status", drained ? "removed" : "draining"},
         {"waited_ms", waited.count()}});
}

}  // namespace

json AdaptersJson(const tier::L2Cascade::View& cascade, const std::vector<std::string>& draining,
                  const server::StatsSnapshot& snapshot) {
  json adapters = json::array();
  for (std::size_t i = 0; i < cascade.size(); ++i) {
    const tier::L2CascadeMember& member = cascade.member(i);
    json config = json::parse(member.config, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) config = member.config;  // shown as given
    json entry = {{"position", i + 1},
                  {"name", member.name},
                  {"config", std::move(config)},
                  {"description", member.description}};
    if (snapshot.l2) {
      for (const tier::L2AdapterStats& a : snapshot.l2->adapters) {
        if (a.name != member.name) continue;
        entry["type"] = a.type;
        entry["condition"] = a.condition.empty() ? "ok" : a.condition;
        entry["objects"] = a.objects;
        entry["usage_bytes"] = a.usage_bytes;
        entry["capacity_bytes"] = a.capacity_bytes;
      }
    }
    adapters.push_back(std::move(entry));
  }
  return {{"adapters", std::move(adapters)}, {"draining", draining}};
}

void AddAdapterRoutes(RouteTable& routes, const HttpConfig& config, tier::L2Tier* l2,
                      std::function<server::StatsSnapshot()> snapshot) {
  routes.Add(HttpMethod::kGet, "/config/adapters", Access::kOpen,
             [l2, snapshot](const httplib::Request&, httplib::Response& res) {
               if (l2 == nullptr) {
                 return Reply(res, 200, {{"adapters", json::array()}, {"draining", json::array()}});
               }
               l2->ReapDrained();  // what drained since its removal gave up waiting
               const server::StatsSnapshot figures = snapshot();
               Reply(res, 200,
                     AdaptersJson(l2->cascade().Current(), l2->cascade().Draining(), figures));
             });
  routes.Add(HttpMethod::kPost, "/config/adapters", Access::kAdmin,
             [fs_root = config.l2_fs_root, l2, snapshot](const httplib::Request& req,
                                                         httplib::Response& res) {
               if (l2 == nullptr) return Error(res, 409, kNoTier);
               AddAdapter(req, res, *l2, snapshot, fs_root);
             });
  routes.Add(
      HttpMethod::kDelete, R"(/config/adapters/([^/]+))", Access::kAdmin,
      [l2](const httplib::Request& req, httplib::Response& res) {
        if (l2 == nullptr) return Error(res, 409, kNoTier);
        RemoveAdapter(req, res, *l2);
      },
      "/config/adapters/fs-2");
}

}  // namespace lmcache::admin_http
