// What every HTTP route shares: JSON replies and errors, and the admin gate
// of routes that change anything (HttpConfig: --http-read-only, the admin
// token, --http-admin-open).
//
// Thread-safety: stateless functions; call them from any handler thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "admin_http/http_config.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace lmcache::admin_http {

void Reply(httplib::Response& res, int status, const nlohmann::json& body);
// {"error": message} with `status`.
void Error(httplib::Response& res, int status, const std::string& message);
// Answers a request to a route that changes something with its refusal, and
// returns true, unless the configuration lets it through.
bool RefuseAdmin(const HttpConfig& config, const httplib::Request& req, httplib::Response& res);

}  // namespace lmcache::admin_http
