// HttpServer: the operator's HTTP surface (reference spec 15.4), on threads
// of its own, never the request loop's.
//
// Routes: GET / (banner), GET /healthcheck (200 healthy, 503 with the reason
// while starting, draining, pre-faulting below the ready fraction, or when a
// watched loop stopped making progress), GET /status (a JSON snapshot), GET
// /metrics (Prometheus text), GET /version, GET|PUT /loglevel, POST
// /clear-cache. Mutating routes answer 403 with --http-read-only. A wrong
// method gets 405 with Allow, an unknown path 404, an oversized body 413, a
// bad body 400, every one a JSON error; a handler that throws costs its
// request (500), never the server. Bodies are capped; each request has a
// deadline to arrive and its reply one to leave, and slow or flooding
// clients cannot hold the probes off (admin_http/guarded_http.h).
//
// Thread-safety: Start/Stop from the controlling thread; handlers run on
// the server's own small pool and read internally synchronised state.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "admin_http/health.h"
#include "admin_http/http_config.h"
#include "admin_http/route_table.h"
#include "lmcache/status.h"
#include "server/service.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}
namespace lmcache::tier {
class L2Tier;
}

namespace lmcache::admin_http {

class GuardedHttpServer;

class HttpServer {
 public:
  // Binds and starts serving; fails (naming the address) when it cannot bind.
  // `l2` (null: no L2 tier) is what the cache routes list and delete in.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpConfig& config,
                                                   server::Service* service, Health* health,
                                                   tier::L2Tier* l2 = nullptr);
  ~HttpServer();  // stops
  void Stop();
  int port() const { return port_; }
  // Every route it serves, with its access (tests walk them).
  const RouteTable& routes() const { return routes_; }

 private:
  HttpServer() = default;
  void AddRoutes();
  void ServeStatus(const httplib::Request& req, httplib::Response& res, server::Service& service,
                   Health& health, const HttpConfig& config) const;

  HttpConfig config_;
  RouteTable routes_;
  server::Service* service_ = nullptr;
  Health* health_ = nullptr;
  tier::L2Tier* l2_ = nullptr;
  std::unique_ptr<httplib::Server> server_;
  GuardedHttpServer* guarded_ = nullptr;  // server_, with its guard's figures
  std::thread thread_;
  int port_ = 0;
};

}  // namespace lmcache::admin_http
