// The bodies of GET /version and GET /config (issue 44, section 4): what
// this build is and every flag's effective value (GET /config/adapters is
// adapter_routes.h's).
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "common/flag_values.h"

namespace lmcache::admin_http {

// {version, commit, build: {type, sanitizers, cuda, io_uring, resp}}.
nlohmann::json VersionJson();
// {flags: {"--name": {value, given}}}: value a string, or an array for a
// repeatable flag, or null for a flag neither given nor with a default.
nlohmann::json ConfigJson(const std::vector<FlagValue>& flags);

}  // namespace lmcache::admin_http
