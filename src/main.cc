// lmcache-server: parse flags, open the L1 pool (taken over from a running
// predecessor, recovered from a dead one's journal, or new: restart/open_pool.h)
// with the endpoints bound before any pool segment is touched, so a duplicate
// start harms nothing; build the L2 tier, the KV events and the service;
// serve ZMQ and HTTP until a signal, then shut down in order (the pool
// segment is unlinked on the way out, or handed to a successor).
//
// Signals: SIGTERM drains (health 503, new registrations refused, registered
// workers served until they leave or --drain-timeout-seconds passes, queued
// writes to L2 flushed), then exits 0; a second SIGTERM or a SIGINT exits at
// once; SIGHUP reopens the log file. SIGUSR1 is raised by the takeover
// service: a successor asked for the pool (warm restart).
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "admin_http/health.h"
#include "admin_http/http_server.h"
#include "admin_http/server_health.h"
#include "common/clock.h"
#include "daemon/command_line.h"
#include "daemon/config.h"
#include "daemon/drain.h"
#include "daemon/fleet_node.h"
#include "daemon/process.h"
#include "events/kv_events.h"
#include "events/vllm_publisher.h"
#include "fleet/fleet_key.h"
#include "fleet/ucx_channel.h"
#include "restart/open_pool.h"
#include "restart/takeover.h"
#include "server/service.h"
#include "store/l1_cache.h"
#include "tier/l2_tier.h"
#include "tier/serde_adapter.h"
#include "transport/router_loop.h"

namespace {

using lmcache::Status;
using lmcache::TimeMs;
namespace daemon = lmcache::daemon;
namespace restart = lmcache::restart;

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : " ") + item;
  return out;
}

// The endpoints, retried for a few seconds after a takeover (the
// predecessor has closed them, but the kernel may still hold a TCP port).
lmcache::Result<std::unique_ptr<lmcache::transport::RouterLoop>> BindEndpoints(
    const lmcache::transport::RouterConfig& router, bool after_takeover) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    auto loop = lmcache::transport::RouterLoop::Create(router);
    if (loop.ok() || !after_takeover || std::chrono::steady_clock::now() >= deadline) return loop;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// What a serving server holds, declared in the order it is built (and so
// destroyed in reverse).
struct Server {
  restart::OpenedPool pool;
  // The element types a serde reads from the registrations: bound to the
  // service's once it exists, unbound before it goes.
  lmcache::tier::ElementTypeDirectory element_types;
  // P2P on: the fleet's parts (daemon/fleet_node.h). Its data channel
  // registered the pool, so it goes just before the pool does; the L2 tier
  // and the service, which read through it, go before it.
  std::unique_ptr<daemon::FleetNode> fleet;
  std::unique_ptr<lmcache::transport::RouterLoop> loop;
  std::unique_ptr<lmcache::tier::L2Tier> l2;
  std::unique_ptr<lmcache::events::KvEvents> kv_events;
  std::unique_ptr<lmcache::events::VllmEventPublisher> kv_publisher;
  std::unique_ptr<lmcache::server::Service> service;
  std::unique_ptr<lmcache::admin_http::Health> health;
  std::unique_ptr<lmcache::admin_http::HttpServer> http;
  std::unique_ptr<restart::TakeoverService> takeover;
  std::thread loop_thread;

  // Members go in reverse order, the service before the fleet, whose data
  // channel's serve guard reads the service's lookup tasks: on a path that
  // did not stop the fleet first (a start that failed), it is detached
  // before anything goes.
  ~Server() {
    element_types.Bind(nullptr);
    if (fleet) fleet->Detach();
  }

  lmcache::store::L1Cache& cache() { return *pool.cache; }
};

// The L2 tier and the KV events, subscribed to the table before anything is
// stored; the tier started.
Status StartTiers(const daemon::ServerConfig& config, const lmcache::Clock& clock, Server& s) {
  lmcache::tier::L2Environment environment;
  environment.element_types = &s.element_types;
  if (config.p2p.enabled()) {
    s.fleet = daemon::FleetNode::Create(config.p2p, clock, s.cache());
    environment.fleet = s.fleet->link();
  }
  if (!config.l2.adapters.empty()) {
    LMC_ASSIGN_OR_RETURN(s.l2,
                         lmcache::tier::L2Tier::Create(config.l2, &s.cache().table(), environment));
  }
  s.kv_events =
      std::make_unique<lmcache::events::KvEvents>(config.events, config.service.chunk_sizes);
  if (s.kv_events->enabled()) {
    s.cache().table().AddListener(&s.kv_events->recorder());
    if (s.l2) {
      s.l2->SetEventObserver(&s.kv_events->recorder());
    }
    if (config.kv_publisher) {
      LMC_ASSIGN_OR_RETURN(s.kv_publisher, lmcache::events::VllmEventPublisher::Start(
                                               *config.kv_publisher, &s.kv_events->log()));
      spdlog::info("publishing KV events in vLLM's format on {}{}", s.kv_publisher->endpoint(),
                   s.kv_publisher->replay_endpoint().empty()
                       ? ""
                       : " (replay on " + s.kv_publisher->replay_endpoint() + ")");
    }
  }
  if (s.l2) s.l2->Start();
  return Status::Ok();
}

// The stats sources of what main owns (the service's own and the fleet's
// are registered by them).
void AddStatsSources(Server& s) {
  auto& sources = s.service->stats_sources();
  sources.Add("transport", [router = s.loop.get()](lmcache::server::StatsSnapshot* snapshot) {
    snapshot->transport = router->Stats();
  });
  if (s.l2) {
    sources.Add("l2", [tier = s.l2.get()](lmcache::server::StatsSnapshot* snapshot) {
      snapshot->l2 = tier->Stats();
    });
  }
  if (s.kv_publisher) {
    sources.Add("kv_publisher",
                [publisher = s.kv_publisher.get()](lmcache::server::StatsSnapshot* snapshot) {
                  snapshot->kv_events.publisher = publisher->Stats();
                });
  }
}

Status StartHttp(const daemon::ServerConfig& config, Server& s) {
  if (config.http_port == 0) return Status::Ok();
  const lmcache::admin_http::HttpConfig http{.host = config.http_host,
                                             .port = config.http_port,
                                             .read_only = config.http_read_only,
                                             .admin_token = config.http_admin_token,
                                             .admin_open = config.http_admin_open,
                                             .l2_fs_root = config.l2_fs_root,
                                             .flags = config.effective_flags};
  LMC_ASSIGN_OR_RETURN(s.http, lmcache::admin_http::HttpServer::Start(http, s.service.get(),
                                                                      s.health.get(), s.l2.get()));
  return Status::Ok();
}

void LogReady(const daemon::ServerConfig& config, const Server& s) {
  spdlog::info(
      "lmcache-server ready: serving {}{} | L1 pool {} ({} bytes, {}) | chunks of {} tokens | "
      "boot id {} | pid {}",
      Join(s.loop->endpoints()),
      s.http ? " | http://" + config.http_host + ":" + std::to_string(s.http->port()) : "",
      config.l1.shm_name, config.l1.size_bytes, restart::PoolOriginName(s.pool.origin),
      config.service.chunk_sizes.Describe(), s.service->boot_id(), getpid());
  if (!config.p2p.enabled()) return;
  // The fleet endpoint is the last one bound (RouterLoop binds it after --url).
  spdlog::info(
      "P2P on: fleet endpoint {} advertised as {} | fleet key {} (fingerprint) | "
      "peers: {}{}",
      s.loop->endpoints().back(), config.p2p.advertise_url, config.p2p.key->fingerprint(),
      config.p2p.peers_list.empty() ? "none listed (--p2p-peers)" : config.p2p.peers_list,
      config.p2p.allow_unauthenticated ? " | unauthenticated peers served" : "");
}

// The service over the pool and the tiers (and the fleet's channel), its
// stats sources, health, HTTP and the takeover socket (once the pool is
// this server's); then serving.
Status StartServing(const daemon::ServerConfig& config, const lmcache::Clock& clock, Server& s) {
  lmcache::server::ServiceConfig service_config = config.service;
  if (s.fleet) {
    LMC_ASSIGN_OR_RETURN(service_config.p2p_data_channel, s.fleet->OpenChannel());
  }
  s.service = std::make_unique<lmcache::server::Service>(
      &s.cache(), &clock, service_config, s.l2 ? s.l2->prefetcher() : nullptr, s.kv_events.get(),
      s.fleet ? s.fleet->chunk_log() : nullptr);
  s.element_types.Bind([&instances = s.service->instances()](const lmcache::store::ObjectKey& key,
                                                             std::uint64_t object_bytes) {
    const auto dtype = instances.ElementDtypeOf(key.model_name, key.layout_namespace, object_bytes);
    return dtype ? lmcache::tier::ElementTypeOfDtype(*dtype) : lmcache::tier::ElementType::kUnknown;
  });
  if (s.fleet) {
    LMC_RETURN_IF_ERROR(s.fleet->Start(*s.service, "tcp://" + config.service.p2p_advertise_url));
  }
  AddStatsSources(s);
  s.health = std::make_unique<lmcache::admin_http::Health>(&clock);
  lmcache::admin_http::WatchServer(*s.health, *s.loop, s.cache(), *s.service,
                                   config.ready_prefault_fraction);
  LMC_RETURN_IF_ERROR(StartHttp(config, s));
  if (!config.restart.socket_path.empty()) {
    LMC_ASSIGN_OR_RETURN(s.takeover,
                         restart::TakeoverService::Start(
                             config.restart.socket_path,
                             restart::TakeoverGeometryOf(config.l1, config.service.chunk_sizes),
                             [] { kill(getpid(), SIGUSR1); }));
  }
  restart::FinishOpening(s.pool, *s.service);
  s.service->StartMaintenance();
  s.loop_thread =
      std::thread([router = s.loop.get(), service = s.service.get()] { router->Run(service); });
  s.health->SetPhase(lmcache::admin_http::Phase::kServing);
  LogReady(config, s);
  return Status::Ok();
}

// Serves until a signal ends it: the successor to hand the pool to, if one asked.
std::optional<restart::PendingTakeover> ServeUntilTheEnd(const daemon::ServerConfig& config,
                                                        const sigset_t& signals, Server& s) {
  int first = 0;
  std::optional<restart::PendingTakeover> successor;
  while (true) {
    first = daemon::WaitForShutdown(signals);
    if (first != SIGUSR1 || (successor = daemon::SuccessorWaiting(s.takeover.get()))) break;
  }
  if (!successor && first == SIGTERM && config.drain_timeout_seconds > 0) {
    // Refusing first, then the line: whoever reads "draining" in the log
    // (an operator, a test) sees registrations refused and a 503 health.
    s.service->SetDraining(true);
    s.health->SetPhase(lmcache::admin_http::Phase::kDraining);
    spdlog::info("SIGTERM: draining (new registrations refused, up to {} s)",
                 config.drain_timeout_seconds);
    // A successor that asks meanwhile gets the pool: the drain ends there.
    daemon::Drain(signals, *s.service, s.l2.get(), config.drain_timeout_seconds, s.takeover.get(),
                  &successor);
  } else if (!successor) {
    spdlog::info("received {}; shutting down", first == SIGINT ? "SIGINT" : "SIGTERM");
  }
  if (successor) {
    spdlog::info("takeover: a successor asked for the pool{}; stopping",
                 successor->cold ? " (it starts cold: " + successor->mismatch + ")" : "");
  }
  return successor;
}

// Stops everything that writes the pool, in order: requests (answered or
// refused), HTTP, the maintenance, the L2 tier (no lock of it outlives it),
// the KV publisher.
void StopServing(Server& s, bool handing_over) {
  s.takeover.reset();  // no second successor
  s.health->SetPhase(lmcache::admin_http::Phase::kDraining);
  // Waits parked without a thread are answered while the transport still
  // sends (nil: "still loading"); none parks after this.
  s.service->AnswerParked();
  if (handing_over) {
    s.loop->StopRefusing(Status(
        lmcache::ErrorCode::kUnavailable,
        "this server is handing its pool over to its successor: retry, the successor answers "
        "on the same endpoint in a moment"));
  } else {
    s.loop->Stop();
  }
  s.loop_thread.join();
  const lmcache::server::TransportStats traffic = s.loop->Stats();
  spdlog::info("served {} requests: {} replies sent, {} refused before dispatch ({} overloaded), "
               "{} undeliverable",
               traffic.received, traffic.replied, traffic.refused, traffic.overloaded,
               traffic.undeliverable);
  if (s.http) s.http->Stop();
  s.loop.reset();
  // Before the peers go: the prefetches in flight (some asking peers) end.
  if (s.fleet) s.fleet->StopFollowing();
  if (s.l2) s.l2->Stop();
  if (s.fleet) s.fleet->StopPeers();
  s.service->StopMaintenance();
  s.kv_publisher.reset();
}

}  // namespace

int main(int argc, char** argv) {
  daemon::ServerConfig config;
  if (const std::optional<int> exit_code = daemon::ConfigureFromCommandLine(argc, argv, &config)) {
    return *exit_code;
  }
  daemon::RaiseDescriptorLimit();
  // Before any thread runs: it sets an environment variable UCX reads later.
  if (config.p2p.enabled()) lmcache::fleet::PreferCopyingTcp();
  const sigset_t signals = daemon::BlockHandledSignals();
  const lmcache::Clock& clock = lmcache::SteadyClock::Instance();

  Server s;
  auto bind = [&](bool after_takeover) -> Status {
    LMC_ASSIGN_OR_RETURN(s.loop, BindEndpoints(config.router, after_takeover));
    return Status::Ok();
  };
  auto opened = restart::OpenPool(&config.l1, config.restart, clock, bind);
  if (!opened.ok()) {
    spdlog::critical("cannot start: {}", opened.status().message());
    return 1;
  }
  s.pool = std::move(opened).value();
  if (Status started = StartTiers(config, clock, s); !started.ok() ||
                                              !(started = StartServing(config, clock, s)).ok()) {
    spdlog::critical("cannot start: {}", started.message());
    return 1;
  }

  std::optional<restart::PendingTakeover> successor = ServeUntilTheEnd(config, signals, s);
  StopServing(s, successor && !successor->cold);
  int exit_code = 0;
  if (successor) {
    if (Status handed = restart::HandOverPool(*successor, s.cache(), *s.service, config.restart.timeout);
        !handed.ok()) {
      spdlog::error("takeover failed: {}; the pool is removed", handed.message());
      exit_code = 1;
    }
  }
  const bool kept = successor && !successor->cold && exit_code == 0;
  if (kept && config.after_handover == "wait") {
    // A pod whose container exits is restarted, and would take the pool
    // back: it stays until its controller deletes it (SIGTERM).
    spdlog::info("handed over; waiting for SIGTERM without serving (--after-handover wait)");
    daemon::WaitForTermination(signals);
  }
  s.pool.cache.reset();
  spdlog::info("L1 pool {} {}; bye", config.l1.shm_name, kept ? "left to the successor" : "removed");
  return exit_code;
}
