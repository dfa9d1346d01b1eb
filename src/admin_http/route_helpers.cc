#include "admin_http/route_helpers.h"

#include <httplib.h>

#include <algorithm>
#include <string_view>

namespace lmcache::admin_http {

using nlohmann::json;

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  // Text that is not UTF-8 (a key read back from a disk tier) is shown
  // repaired rather than failing the whole reply.
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void Error(httplib::Response& res, int status, const std::string& message) {
  Reply(res, status, json{{"error", message}});
}

int HttpStatusOf(const Status& status) {
  switch (status.code()) {
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kAlreadyExists: return 409;
    case ErrorCode::kWrongState: return 409;
    case ErrorCode::kResourceExhausted: return 429;
    case ErrorCode::kNotSupported: return 501;
    default: return 400;
  }
}

namespace {

// Equal or not, in a time that depends on the lengths only (a token is not
// guessed byte by byte from response times).
bool SameToken(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

bool RefuseAdmin(const HttpConfig& config, const httplib::Request& req, httplib::Response& res,
                 bool changes_state) {
  if (changes_state && config.read_only) {
    Error(res, 403, "this server was started with --http-read-only");
    return true;
  }
  if (config.admin_open) return false;
  if (config.admin_token.empty()) {
    Error(res, 403,
          "admin routes (those that change anything or show cached keys) are off: every local "
          "process reaches this port. Start "
          "the server with --http-admin-token-file FILE and send 'Authorization: Bearer "
          "<token>', or with --http-admin-open");
    return true;
  }
  constexpr std::string_view kBearer = "Bearer ";
  const std::string authorization = req.get_header_value("Authorization");
  if (!std::string_view(authorization).starts_with(kBearer)) {
    res.set_header("WWW-Authenticate", "Bearer");
    Error(res, 401, "this route needs 'Authorization: Bearer <token>' (--http-admin-token-file)");
    return true;
  }
  if (!SameToken(std::string_view(authorization).substr(kBearer.size()), config.admin_token)) {
    Error(res, 403, "wrong admin token");
    return true;
  }
  return false;
}

}  // namespace lmcache::admin_http
