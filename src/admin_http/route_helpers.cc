#include "admin_http/route_helpers.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
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

// The host part of a Host header or an origin's authority ("h:p", "[v6]:p").
std::string_view HostPart(std::string_view authority) {
  if (authority.starts_with('[')) {
    const std::size_t close = authority.find(']');
    return close == std::string_view::npos ? authority : authority.substr(1, close - 1);
  }
  const std::size_t colon = authority.rfind(':');
  return colon == std::string_view::npos ? authority : authority.substr(0, colon);
}

bool IsIpLiteral(std::string_view host) {
  in6_addr v6{};
  in_addr v4{};
  const std::string text(host);
  return ::inet_pton(AF_INET, text.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, text.c_str(), &v6) == 1;
}

// A name this server answers to: an address, "localhost", --http-host, or
// the machine's name. Anything else is a name someone else's DNS pointed
// here (DNS rebinding: a web page's script talking to this port).
bool OwnHost(const HttpConfig& config, std::string_view host) {
  if (host.empty()) return false;
  if (IsIpLiteral(host) || host == "localhost" || host == config.host) return true;
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 && host == name;
}

// Why a request to an admin route looks like a browser's cross-site one
// (issue 62, section 8), or nullopt: with --http-admin-open a foreign Host;
// an Origin other than the one the Host names; Sec-Fetch-Site cross-site;
// or a body of a type a page may send without asking (text/plain, a form).
std::optional<std::string> CrossSite(const HttpConfig& config, const httplib::Request& req) {
  const std::string host = req.get_header_value("Host");
  // With a token a rebound page has nothing to send; operators reach the
  // port by names of their own (a Service's DNS name). Without one
  // (--http-admin-open) only this server's own names are taken.
  if (config.admin_open && !OwnHost(config, HostPart(host))) {
    return "the Host header '" + host + "' does not name this server: send the request to "
           "one of its addresses (a name only DNS rebinding would point here is refused)";
  }
  if (req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    const std::size_t scheme = origin.find("://");
    const std::string_view authority =
        scheme == std::string::npos ? std::string_view() : std::string_view(origin).substr(scheme + 3);
    if (authority != host) {
      return "a request from the web page of another origin ('" + origin +
             "') may not change this server";
    }
  }
  if (req.get_header_value("Sec-Fetch-Site") == "cross-site") {
    return "a cross-site request may not change this server";
  }
  const std::string type = req.get_header_value("Content-Type");
  for (std::string_view simple :
       {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"}) {
    if (std::string_view(type).starts_with(simple)) {
      return "a body of type '" + type + "' is what any web page may send: send "
             "application/json (or no body)";
    }
  }
  return std::nullopt;
}

}  // namespace

bool IsAdmin(const HttpConfig& config, const httplib::Request& req) {
  if (CrossSite(config, req)) return false;
  if (config.admin_open) return true;
  constexpr std::string_view kBearer = "Bearer ";
  const std::string authorization = req.get_header_value("Authorization");
  return !config.admin_token.empty() && std::string_view(authorization).starts_with(kBearer) &&
         SameToken(std::string_view(authorization).substr(kBearer.size()), config.admin_token);
}

bool RefuseAdmin(const HttpConfig& config, const httplib::Request& req, httplib::Response& res,
                 bool changes_state) {
  if (changes_state && config.read_only) {
    Error(res, 403, "this server was started with --http-read-only");
    return true;
  }
  if (std::optional<std::string> why = CrossSite(config, req)) {
    Error(res, 403, *why);
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
