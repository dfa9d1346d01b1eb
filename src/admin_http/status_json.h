// GET /status: the server's identity, phase and health, a summary of its
// pool, L1 and L2 usage (the fields /status has always had, for the scripts
// that read them), its registered instances, and under "stats" every figure
// of the stats schema (admin_http/stats_json.h): a figure added to the
// schema reaches /status with no code here.
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <nlohmann/json.hpp>

#include "admin_http/health.h"
#include "server/server_status.h"

namespace lmcache::admin_http {

nlohmann::json StatusJson(const server::ServerStatus& status, const HealthVerdict& verdict,
                          Phase phase, int pid);

}  // namespace lmcache::admin_http
