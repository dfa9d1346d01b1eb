// RouteTable: every HTTP route declared once, as {method, path, access,
// handler}. Registering the table on a server puts each handler behind its
// access gate (route_helpers.h, RefuseAdmin) and answers every other method
// on a declared path with 405 and an Allow header derived from the table,
// regex paths included. So a new route is open only when its author says
// kOpen, and the 405 answers cannot drift from the routes.
//
// Thread-safety: filled and registered on one thread before the server
// starts; read-only afterwards (routes() may then be read from any thread).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "admin_http/http_config.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace lmcache::admin_http {

enum class HttpMethod { kGet, kPut, kPost, kDelete };
std::string_view MethodName(HttpMethod method);

enum class Access {
  kOpen,       // anyone who reaches the port
  kAdminRead,  // the admin gate; shows what every peer must not see, changes nothing
               // (--http-read-only lets it through)
  kAdmin,      // the admin gate, and refused by --http-read-only: changes the server
};
std::string_view AccessName(Access access);

using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&)>;

struct Route {
  HttpMethod method;
  std::string path;  // a literal path, or an httplib regex with a (group)
  Access access;
  RouteHandler handle;
  std::string example;  // a path this route answers: `path` itself unless a regex
};

class RouteTable {
 public:
  // `example` is needed for a regex `path` (a concrete path it matches).
  void Add(HttpMethod method, std::string path, Access access, RouteHandler handle,
           std::string example = "");

  // Registers every route on `server`, gated by `config` (which must outlive
  // the server), and the 405 answers of each declared path.
  void RegisterOn(httplib::Server& server, const HttpConfig& config) const;

  const std::vector<Route>& routes() const { return routes_; }
  // "GET, PUT": the methods declared on `path`, in table order.
  std::string AllowedOn(const std::string& path) const;
  // Whether the table has a route of `method` on `path` (the others answer 405).
  bool Declares(const std::string& path, HttpMethod method) const;

 private:
  std::vector<Route> routes_;
};

}  // namespace lmcache::admin_http
