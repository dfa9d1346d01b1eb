// GET /status: the server's identity, phase and health, its pool, L1 and L2
// usage and its registered instances, as one JSON object.
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <nlohmann/json.hpp>

#include "admin_http/health.h"
#include "server/stats.h"

namespace lmcache::admin_http {

nlohmann::json StatusJson(const server::ServerStatus& status, const HealthVerdict& verdict,
                          Phase phase, int pid);

}  // namespace lmcache::admin_http
