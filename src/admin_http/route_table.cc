#include "admin_http/route_table.h"

#include <httplib.h>

#include <set>

#include "admin_http/route_helpers.h"

namespace lmcache::admin_http {
namespace {

constexpr HttpMethod kMethods[] = {HttpMethod::kGet, HttpMethod::kPut, HttpMethod::kPost,
                                   HttpMethod::kDelete};

void RegisterOne(httplib::Server& server, HttpMethod method, const std::string& path,
                 httplib::Server::Handler handler) {
  switch (method) {
    case HttpMethod::kGet: server.Get(path, std::move(handler)); return;
    case HttpMethod::kPut: server.Put(path, std::move(handler)); return;
    case HttpMethod::kPost: server.Post(path, std::move(handler)); return;
    case HttpMethod::kDelete: server.Delete(path, std::move(handler)); return;
  }
}

}  // namespace

std::string_view MethodName(HttpMethod method) {
  switch (method) {
    case HttpMethod::kGet: return "GET";
    case HttpMethod::kPut: return "PUT";
    case HttpMethod::kPost: return "POST";
    case HttpMethod::kDelete: return "DELETE";
  }
  return "?";
}

std::string_view AccessName(Access access) {
  switch (access) {
    case Access::kOpen: return "open";
    case Access::kAdminRead: return "admin (read)";
    case Access::kAdmin: return "admin";
  }
  return "?";
}

void RouteTable::Add(HttpMethod method, std::string path, Access access, RouteHandler handle,
                     std::string example) {
  if (example.empty()) example = path;
  routes_.push_back({method, std::move(path), access, std::move(handle), std::move(example)});
}

bool RouteTable::Declares(const std::string& path, HttpMethod method) const {
  for (const Route& route : routes_) {
    if (route.path == path && route.method == method) return true;
  }
  return false;
}

std::string RouteTable::AllowedOn(const std::string& path) const {
  std::string allowed;
  for (const HttpMethod method : kMethods) {
    if (Declares(path, method))
      allowed += (allowed.empty() ? "" : ", ") + std::string(MethodName(method));
  }
  return allowed;
}

void RouteTable::RegisterOn(httplib::Server& server, const HttpConfig& config) const {
  for (const Route& route : routes_) {
    RegisterOne(
        server, route.method, route.path,
        [&config, access = route.access, handle = route.handle](const httplib::Request& req,
                                                                httplib::Response& res) {
          if (access != Access::kOpen && RefuseAdmin(config, req, res, access == Access::kAdmin)) {
            return;
          }
          handle(req, res);
        });
  }
  std::set<std::string> paths;
  for (const Route& route : routes_) {
    if (!paths.insert(route.path).second) continue;
    const std::string allowed = AllowedOn(route.path);
    auto wrong_method = [allowed](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allowed);
      Error(res, 405,
            req.method + " is not allowed on " + req.path + " (allowed: " + allowed + ")");
    };
    for (const HttpMethod method : kMethods) {
      if (!Declares(route.path, method)) RegisterOne(server, method, route.path, wrong_method);
    }
    server.Patch(route.path, wrong_method);
  }
}

}  // namespace lmcache::admin_http
