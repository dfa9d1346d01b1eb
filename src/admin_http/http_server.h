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
// request (500), never the server. Bodies are capped and reads time out.
//
// Thread-safety: Start/Stop from the controlling thread; handlers run on
// the server's own small pool and read internally synchronised state.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/flag_values.h"
#include "lmcache/status.h"
#include "admin_http/health.h"
#include "server/service.h"

namespace httplib {
class Server;
}

namespace lmcache::admin_http {

struct HttpConfig {
  std::string host = "127.0.0.1";  // --http-host
  int port = 8080;                 // --http-port; 0 = disabled, -1 = any free port (tests)
  bool read_only = false;          // --http-read-only: mutating routes refused
  // Mutating routes need 'Authorization: Bearer <admin_token>' when it is set,
  // are open to every peer with admin_open, and are off otherwise.
  std::string admin_token;  // --http-admin-token-file's content
  bool admin_open = false;  // --http-admin-open
  // What GET /config and GET /config/adapters show: every flag (secrets
  // masked), and each L2 adapter's JSON as given (masked), in cascade order.
  std::vector<FlagValue> flags;
  std::vector<std::string> adapter_configs;
  std::size_t max_body_bytes = 64 * 1024;
  int io_timeout_seconds = 5;
  unsigned threads = 2;
};

class HttpServer {
 public:
  // Binds and starts serving; fails (naming the address) when it cannot bind.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpConfig& config,
                                                   server::Service* service, Health* health);
  ~HttpServer();  // stops
  void Stop();
  int port() const { return port_; }

 private:
  HttpServer() = default;
  void AddRoutes();

  HttpConfig config_;
  server::Service* service_ = nullptr;
  Health* health_ = nullptr;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace lmcache::admin_http
