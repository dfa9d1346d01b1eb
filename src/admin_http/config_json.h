// The bodies of GET /version, GET /config and GET /config/adapters (issue
// 44, section 4): what this build is, every flag's effective value, and the
// L2 adapters in cascade order with their configuration and state.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "common/flag_values.h"
#include "server/stats.h"

namespace lmcache::admin_http {

// {version, commit, build: {type, sanitizers, cuda, io_uring, resp}}.
nlohmann::json VersionJson();
// {flags: {"--name": {value, given}}}: value a string, or an array for a
// repeatable flag, or null for a flag neither given nor with a default.
nlohmann::json ConfigJson(const std::vector<FlagValue>& flags);
// {adapters: [{position, type, config, description, condition, objects,
// usage_bytes, capacity_bytes}]}: `configs[i]` (masked JSON as given) with
// the live figures of adapter i; condition "ok" or what is failing.
nlohmann::json AdaptersJson(const std::vector<std::string>& configs,
                            const server::StatsSnapshot& snapshot);

}  // namespace lmcache::admin_http
