#include "admin_http/quota_routes.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "admin_http/route_helpers.h"
#include "store/object_key.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double Gb(std::uint64_t bytes) { return static_cast<double>(bytes) / kGiB; }

std::string SaltName(const std::string& salt) {
  return salt.empty() ? std::string(store::kDefaultSaltName) : salt;
}

}  // namespace

Result<std::string> SaltFromPath(const std::string& segment) {
  const std::string salt = segment == store::kDefaultSaltName ? "" : segment;
  LMC_RETURN_IF_ERROR(store::ValidateCacheSalt(salt));
  return salt;
}

Result<std::uint64_t> QuotaBytesFromBody(const std::string& body) {
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return InvalidArgument("expected a JSON object {\"limit_gb\": <number >= 0>}");
  }
  const auto limit = parsed.find("limit_gb");
  if (limit == parsed.end()) return InvalidArgument("missing limit_gb");
  if (!limit->is_number()) return InvalidArgument("limit_gb must be a number");
  return store::QuotaBytesFromGb(limit->get<double>());
}

json TenantQuotaJson(const store::TenantAccount& account, store::QuotaMode mode) {
  const bool exists = account.limit_bytes.has_value();
  return {
      {"cache_salt", SaltName(account.salt)},
      {"limit_gb", exists ? Gb(*account.limit_bytes) : 0.0},
      {"current_usage_gb", Gb(account.used_bytes)},
      {"exists", exists},
      // Ours, beyond the reference's fields.
      {"limit_bytes", exists ? json(*account.limit_bytes) : json(nullptr)},
      {"usage_bytes", account.used_bytes},
      {"refused_objects", account.refused_objects},
      {"refused_bytes", account.refused_bytes},
      {"quota_evicted_objects", account.quota_evicted_objects},
      {"quota_evicted_bytes", account.quota_evicted_bytes},
      {"mode", std::string(store::QuotaModeName(mode))},
  };
}

json QuotasJson(const store::TenantTotals& totals, store::QuotaMode mode) {
  json users = json::object();
  for (const store::TenantAccount& account : totals.with_quota) {
    users[SaltName(account.salt)] = {{"limit_gb", Gb(account.limit_bytes.value_or(0))},
                                     {"current_usage_gb", Gb(account.used_bytes)},
                                     {"limit_bytes", account.limit_bytes.value_or(0)},
                                     {"usage_bytes", account.used_bytes},
                                     {"refused_objects", account.refused_objects},
                                     {"quota_evicted_objects", account.quota_evicted_objects}};
  }
  return {{"users", users},
          {"mode", std::string(store::QuotaModeName(mode))},
          {"other",
           {{"tenants", totals.other_tenants},
            {"current_usage_gb", Gb(totals.other_used_bytes)},
            {"usage_bytes", totals.other_used_bytes},
            {"refused_objects", totals.other_refused_objects}}}};
}

void AddQuotaRoutes(RouteTable& routes, store::ObjectTable& table) {
  static constexpr const char* kOne = R"(/quota/([^/]+))";
  static constexpr const char* kOneExample = "/quota/_default";
  routes.Add(HttpMethod::kGet, "/quota", Access::kOpen,
             [&table](const httplib::Request&, httplib::Response& res) {
               Reply(res, 200, QuotasJson(table.tenants().Totals(), table.tenants().mode()));
             });
  // One tenant's figures answer for any salt, quota or not: a probe of a
  // guessed salt, so behind the admin token (read-only mode does not refuse it).
  routes.Add(
      HttpMethod::kGet, kOne, Access::kAdminRead,
      [&table](const httplib::Request& req, httplib::Response& res) {
        auto salt = SaltFromPath(req.matches[1]);
        if (!salt.ok()) return Error(res, 400, salt.status().message());
        Reply(res, 200, TenantQuotaJson(table.tenants().Get(*salt), table.tenants().mode()));
      },
      kOneExample);
  routes.Add(
      HttpMethod::kPut, kOne, Access::kAdmin,
      [&table](const httplib::Request& req, httplib::Response& res) {
        auto salt = SaltFromPath(req.matches[1]);
        if (!salt.ok()) return Error(res, 400, salt.status().message());
        auto bytes = QuotaBytesFromBody(req.body);
        if (!bytes.ok()) return Error(res, 400, bytes.status().message());
        const double given_gb = json::parse(req.body)["limit_gb"].get<double>();
        if (const Status set = table.SetQuota(*salt, *bytes); !set.ok()) {
          return Error(res, 409, set.message());
        }
        spdlog::info("quota of tenant '{}' set to {} bytes over HTTP", SaltName(*salt), *bytes);
        Reply(res, 200,
              {{"cache_salt", SaltName(*salt)}, {"limit_gb", given_gb}, {"status", "ok"}});
      },
      kOneExample);
  routes.Add(
      HttpMethod::kDelete, kOne, Access::kAdmin,
      [&table](const httplib::Request& req, httplib::Response& res) {
        auto salt = SaltFromPath(req.matches[1]);
        if (!salt.ok()) return Error(res, 400, salt.status().message());
        const bool removed = table.RemoveQuota(*salt);
        if (removed) spdlog::info("quota of tenant '{}' removed over HTTP", SaltName(*salt));
        Reply(res, 200,
              {{"cache_salt", SaltName(*salt)}, {"status", removed ? "removed" : "not_found"}});
      },
      kOneExample);
}

}  // namespace lmcache::admin_http
