#include "admin_http/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string_view>

#include <nlohmann/json.hpp>

#include "admin_http/adapter_routes.h"
#include "admin_http/cache_routes.h"
#include "admin_http/config_json.h"
#include "admin_http/dashboard.h"
#include "admin_http/guarded_http.h"
#include "admin_http/memory_pressure.h"
#include "admin_http/pin_routes.h"
#include "admin_http/prefetch_routes.h"
#include "admin_http/prometheus.h"
#include "admin_http/quota_routes.h"
#include "admin_http/route_helpers.h"
#include "admin_http/route_table.h"
#include "admin_http/status_json.h"
#include "common/logging.h"
#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"
#include "common/version.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

// The clear_cache reply: {cleared_objects: n}.
Result<std::uint64_t> ClearedObjects(std::string_view reply) {
  msgpk::MsgpackCursor cursor(reply);
  LMC_ASSIGN_OR_RETURN(const std::uint32_t fields, cursor.ReadMapHeader("clear_cache reply"));
  for (std::uint32_t i = 0; i < fields; ++i) {
    LMC_ASSIGN_OR_RETURN(const std::string_view name, cursor.ReadStr("clear_cache field"));
    if (name == "cleared_objects") return cursor.ReadUint("cleared_objects");
    LMC_RETURN_IF_ERROR(cursor.Skip());
  }
  return Status(ErrorCode::kInternal, "the clear_cache reply has no cleared_objects");
}

// PUT /loglevel: ?level= or {"level": ...}.
void SetLogLevelRoute(const httplib::Request& req, httplib::Response& res) {
  std::string level = req.get_param_value("level");
  if (level.empty() && !req.body.empty()) {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("level") ||
        !body["level"].is_string()) {
      return Error(res, 400,
                   "expected {\"level\": \"<trace|debug|info|warn|error|critical|off>\"}");
    }
    level = body["level"].get<std::string>();
  }
  if (Status set = SetLogLevel(level); !set.ok()) return Error(res, 400, set.message());
  spdlog::warn("log level set to {} over HTTP", level);
  Reply(res, 200, {{"level", CurrentLogLevel()}});
}

// POST /clear-cache: through the op table, as the ZMQ clear, so it is
// counted in its stats row (clear_cache) and governed by --admin-ops too.
void ClearCache(const httplib::Request& req, httplib::Response& res, server::Service& service) {
  const std::string force = msgpk::Encoder().Int(1).Take();
  const std::string_view payloads[] = {force};
  const std::string connection = "http:" + req.remote_addr;
  server::RequestContext context;
  context.connection = connection;
  context.transport = server::Transport::kHttp;
  context.local_peer = server::IsLoopbackAddress(req.remote_addr);
  const server::Reply reply = service.Call("clear_cache", payloads, context);
  if (!reply.status.ok()) {
    return Error(res, reply.status.code() == ErrorCode::kPermissionDenied ? 403 : 500,
                 reply.status.message());
  }
  auto cleared = ClearedObjects(reply.value);
  if (!cleared.ok()) return Error(res, 500, cleared.status().message());
  Reply(res, 200, {{"status", "ok"}, {"cleared_objects", *cleared}});
}

// Unknown paths 404, oversized bodies 413, other refusals and a handler's
// exception: each a JSON error, and the server keeps serving.
void SetErrorHandlers(httplib::Server& s, std::size_t max_body_bytes) {
  s.set_error_handler(
      [max_body = max_body_bytes](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;  // a route already answered (405, 4xx with a body)
        if (res.status == 404) return Error(res, 404, "no such route: " + req.path);
        if (res.status == 413) {
          return Error(res, 413,
                       "request body too large: at most " + std::to_string(max_body >> 10) +
                           " KiB, and 8 KiB as application/x-www-form-urlencoded (curl -d's "
                           "default): send JSON with 'Content-Type: application/json'");
        }
        Error(res, res.status, "request refused");
      });
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr failure) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(failure);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("HTTP {} {} failed: {}", req.method, req.path, what);
        Error(res, 500, "internal error: " + what);
      });
}

}  // namespace

void HttpServer::ServeStatus(const httplib::Request& req, httplib::Response& res,
                             server::Service& service, Health& health,
                             const HttpConfig& config) const {
  json status = StatusJson(service.CollectStatus(), health.Check(), health.phase(), ::getpid());
  // 64 bits of an HMAC of the fleet key let anyone test guessed keys
  // offline: shown to admins only (issue 62, section 8).
  if (!IsAdmin(config, req) && status.contains("p2p")) status["p2p"].erase("key_fingerprint");
  const HttpGuardStats guard = guarded_->GuardStats();
  json& http = status["http"];
#define LMC_GUARD_JSON_(member, key, ...) http[key] = guard.member;
  LMC_HTTP_GUARD_STATS(LMC_GUARD_JSON_, LMC_STATS_NONE_)
#undef LMC_GUARD_JSON_
  Reply(res, 200, status);
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpConfig& config,
                                                      server::Service* service, Health* health,
                                                      tier::L2Tier* l2) {
  std::unique_ptr<HttpServer> http(new HttpServer());
  http->config_ = config;
  http->service_ = service;
  http->health_ = health;
  http->l2_ = l2;
  HttpGuardConfig guard;
  guard.request_deadline = std::chrono::seconds(2 * std::max(1, config.io_timeout_seconds));
  auto guarded = std::make_unique<GuardedHttpServer>(guard);
  http->guarded_ = guarded.get();
  http->server_ = std::move(guarded);
  httplib::Server& s = *http->server_;
  // A thread per connection (GuardedHttpServer bounds them): a slow client
  // never queues a probe behind it.
  s.new_task_queue = [] { return NewThreadPerConnectionQueue(); };
  s.set_payload_max_length(config.max_body_bytes);
  s.set_read_timeout(config.io_timeout_seconds, 0);
  s.set_write_timeout(config.io_timeout_seconds, 0);
  s.set_keep_alive_max_count(100);
  http->AddRoutes();
  http->guarded_->Prime();
  const int port = config.port < 0 ? s.bind_to_any_port(config.host)
                                   : (s.bind_to_port(config.host, config.port) ? config.port : -1);
  if (port < 0) {
    return Status(ErrorCode::kUnavailable,
                  "cannot serve HTTP on " + config.host + ":" + std::to_string(config.port) +
                      " (in use, or no such address): choose another --http-port or "
                      "--http-host, or --http-port 0 to turn HTTP off");
  }
  http->port_ = port;
  http->thread_ = std::thread([raw = http.get()] { raw->server_->listen_after_bind(); });
  return http;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpServer::AddRoutes() {
  server::Service& service = *service_;
  Health& health = *health_;
  const HttpConfig& config = config_;
  RouteTable& routes = routes_;

  routes.Add(
      HttpMethod::kGet, "/", Access::kOpen, [](const httplib::Request&, httplib::Response& res) {
        Reply(res, 200, {{"status", "ok"}, {"service", "lmcache-server"}, {"version", kVersion}});
      });
  routes.Add(HttpMethod::kGet, "/healthcheck", Access::kOpen,
             [&health](const httplib::Request&, httplib::Response& res) {
               const HealthVerdict verdict = health.Check();
               if (verdict.healthy) {
                 Reply(res, 200, {{"status", "healthy"}});
               } else {
                 Reply(res, 503, {{"status", "unhealthy"}, {"reason", verdict.reason}});
               }
             });
  routes.Add(
      HttpMethod::kGet, "/status", Access::kOpen,
      [this, &service, &health, &config](const httplib::Request& req, httplib::Response& res) {
        ServeStatus(req, res, service, health, config);
      });
  routes.Add(HttpMethod::kGet, "/status/memory-pressure", Access::kOpen,
             [&service](const httplib::Request&, httplib::Response& res) {
               const auto now = std::chrono::system_clock::now().time_since_epoch();
               Reply(res, 200,
                     MemoryPressureJson(
                         service.CollectStatus(),
                         std::chrono::duration_cast<std::chrono::milliseconds>(now).count()));
             });
  routes.Add(HttpMethod::kGet, "/metrics", Access::kOpen,
             [&service, &health](const httplib::Request&, httplib::Response& res) {
               res.set_content(RenderPrometheus(service.Snapshot(), health.Check(), health.phase()),
                               "text/plain; version=0.0.4; charset=utf-8");
             });
  routes.Add(
      HttpMethod::kGet, "/version", Access::kOpen,
      [](const httplib::Request&, httplib::Response& res) { Reply(res, 200, VersionJson()); });
  routes.Add(HttpMethod::kGet, "/config", Access::kOpen,
             [&config](const httplib::Request&, httplib::Response& res) {
               Reply(res, 200, ConfigJson(config.flags));
             });
  routes.Add(HttpMethod::kGet, "/loglevel", Access::kOpen,
             [](const httplib::Request&, httplib::Response& res) {
               Reply(res, 200, {{"level", CurrentLogLevel()}});
             });
  routes.Add(HttpMethod::kPut, "/loglevel", Access::kAdmin, SetLogLevelRoute);
  routes.Add(HttpMethod::kPost, "/clear-cache", Access::kAdmin,
             [&service](const httplib::Request& req, httplib::Response& res) {
               ClearCache(req, res, service);
             });

  AddAdapterRoutes(routes, config, l2_, [&service] { return service.Snapshot(); });
  AddQuotaRoutes(routes, service.table());
  AddCacheRoutes(routes, service, l2_);
  AddPinRoutes(routes, service);
  AddPrefetchRoutes(routes, service);
  AddDashboardRoute(routes);

  httplib::Server& s = *server_;
  // Each route behind its gate; every other method on a declared path 405
  // with Allow; unknown paths 404 (the error handler below).
  routes.RegisterOn(s, config);
  SetErrorHandlers(s, config.max_body_bytes);
}

}  // namespace lmcache::admin_http
