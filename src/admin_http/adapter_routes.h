// The L2 cascade's routes (issue 44, sections 4 and 5): GET /config/adapters
// lists the adapters in cascade order with their configuration and state;
// POST /config/adapters adds one (the body is the JSON of an --l2-adapter,
// `?position=N` places it, 1-based, default last); DELETE
// /config/adapters/{name} removes one after its in-flight stores and loads
// drained (`?drain_timeout_s=S`, default 30: past it the answer is 202 and
// the adapter closes when its last load ends). POST and DELETE sit behind
// the admin gate; a server started without an L2 tier answers them 409.
//
// Thread-safety: the handlers run on the HTTP server's threads; the tier's
// runtime calls are internally synchronised.
#pragma once

#include <nlohmann/json.hpp>

#include "admin_http/http_config.h"
#include "admin_http/route_table.h"
#include "server/stats.h"
#include "tier/l2_cascade.h"

namespace lmcache::tier {
class L2Tier;
}

namespace lmcache::admin_http {

// {adapters: [{position, name, type, config, description, condition,
// objects, usage_bytes, capacity_bytes}], draining: [names]}: the members
// of `cascade` with the live figures `snapshot` has for each (by name).
nlohmann::json AdaptersJson(const tier::L2Cascade::View& cascade,
                            const std::vector<std::string>& draining,
                            const server::StatsSnapshot& snapshot);

// `snapshot` reads the server's figures (Service::Snapshot).
void AddAdapterRoutes(RouteTable& routes, const HttpConfig& config, tier::L2Tier* l2,
                      std::function<server::StatsSnapshot()> snapshot);

}  // namespace lmcache::admin_http
