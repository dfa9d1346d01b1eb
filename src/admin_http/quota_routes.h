// The per-tenant quota routes, with the reference's paths, fields and
// validation (p2p-spec.md 12.1): PUT|GET|DELETE /quota/{salt} and GET
// /quota. `_default` names the empty salt. PUT, DELETE and GET
// /quota/{salt} (which answers for any salt: a probe of a guessed one) sit
// behind the admin gate (route_helpers.h); GET /quota is open, as /status
// is, and shows only the tenants an operator gave a quota (every other
// tenant is counted in one "other" bucket and never named).
//
// Thread-safety: the handlers run on the HTTP server's threads and call the
// internally synchronised ObjectTable.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "admin_http/http_config.h"
#include "admin_http/route_table.h"
#include "lmcache/status.h"
#include "store/object_table.h"
#include "store/tenant_ledger.h"

namespace lmcache::admin_http {

// The salt a path segment names ("_default": the empty salt), validated.
Result<std::string> SaltFromPath(const std::string& segment);
// The quota in bytes of a PUT body {"limit_gb": number}: 400's message otherwise.
Result<std::uint64_t> QuotaBytesFromBody(const std::string& body);
// GET /quota/{salt}'s answer for `account` under `mode`.
nlohmann::json TenantQuotaJson(const store::TenantAccount& account, store::QuotaMode mode);
// GET /quota's answer.
nlohmann::json QuotasJson(const store::TenantTotals& totals, store::QuotaMode mode);

void AddQuotaRoutes(RouteTable& routes, store::ObjectTable& table);

}  // namespace lmcache::admin_http
