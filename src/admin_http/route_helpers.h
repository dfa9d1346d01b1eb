// What every HTTP route shares: JSON replies and errors, and the admin gate
// of routes that change anything (HttpConfig: --http-read-only, the admin
// token, --http-admin-open).
//
// Thread-safety: stateless functions; call them from any handler thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "admin_http/http_config.h"
#include "lmcache/status.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace lmcache::admin_http {

void Reply(httplib::Response& res, int status, const nlohmann::json& body);
// {"error": message} with `status`.
void Error(httplib::Response& res, int status, const std::string& message);
// The status that answers a request refused with `status`: 404 not found,
// 409 already exists or the wrong state, 429 resources exhausted, 501 not
// supported, 400 otherwise (the request's fault).
int HttpStatusOf(const Status& status);
// Answers a request to an admin route with its refusal, and returns true,
// unless the configuration lets it through. Routes that change something
// are also refused by --http-read-only; those that only show what other
// routes keep from every peer (`changes_state` false: keys, salts) are not.
// Every admin route refuses what looks like a browser's cross-site request
// (another Origin, a Sec-Fetch-Site of cross-site, a text/plain or form
// body; and, with --http-admin-open, where no token stands in the way, a
// Host that does not name this server): a web page cannot drive it, nor
// reach it by DNS rebinding.
bool RefuseAdmin(const HttpConfig& config, const httplib::Request& req, httplib::Response& res,
                 bool changes_state = true);
// Whether `req` would pass an admin route (for open routes that show an
// admin more: the fleet key's fingerprint in /status).
bool IsAdmin(const HttpConfig& config, const httplib::Request& req);

}  // namespace lmcache::admin_http
