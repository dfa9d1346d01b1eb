// lmcache-server: parse flags, bind the endpoints (before touching any pool
// segment, so a duplicate start harms nothing), build the L1 cache, the L2
// tier and the service, serve ZMQ and HTTP until a signal, then shut down in
// order (the pool segment is unlinked on the way out).
//
// Signals: SIGTERM drains (health 503, new registrations refused, registered
// workers served until they leave or --drain-timeout-seconds passes, queued
// writes to L2 flushed), then exits 0; a second SIGTERM or a SIGINT exits at
// once; SIGHUP reopens the log file. SIGUSR1 is raised by the takeover
// service: a successor asked for the pool (warm restart, below).
//
// Warm restart (docs/architecture.md, "Restarts and upgrades"): a server
// started with --takeover asks the one running on its takeover socket for
// the pool before it binds anything; that one stops serving, hands the
// segment and its index over and exits without removing the pool, and this
// one adopts it, binds the same endpoints and serves.
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/clock.h"
#include "common/logging.h"
#include "common/system_info.h"
#include "common/version.h"
#include "admin_http/health.h"
#include "admin_http/http_server.h"
#include "daemon/config.h"
#include "events/kv_events.h"
#include "events/vllm_publisher.h"
#include "restart/takeover.h"
#include "store/pool_recovery.h"
#include "transport/router_loop.h"
#include "server/service.h"
#include "store/l1_cache.h"
#include "tier/l2_tier.h"

namespace {

using lmcache::TimeMs;

// Blocks the signals main handles in this thread before any other starts, so
// every thread inherits the mask and the main thread alone receives them.
sigset_t BlockHandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : " ") + item;
  return out;
}

// The next handled signal within `timeout` (0 = none); SIGHUP is handled here.
int NextSignal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  const timespec wait{static_cast<time_t>(timeout.count() / 1000),
                      static_cast<long>((timeout.count() % 1000) * 1'000'000)};
  const int signal_number = sigtimedwait(&signals, nullptr, &wait);
  if (signal_number != SIGHUP) return signal_number > 0 ? signal_number : 0;
  if (auto reopened = lmcache::ReopenLogFile(); !reopened.ok()) {
    spdlog::error("SIGHUP: {}", reopened.message());
  } else {
    spdlog::info("SIGHUP: log file reopened");
  }
  return 0;
}

// Waits for the first SIGTERM, SIGINT or SIGUSR1 (a takeover); returns it.
int WaitForShutdown(const sigset_t& signals) {
  while (true) {
    if (const int s = NextSignal(signals, std::chrono::milliseconds(1000)); s != 0) return s;
  }
}

// The successor the takeover thread accepted, if a SIGUSR1 announced one
// (any other SIGUSR1 is ignored: it must not stop the server).
std::optional<lmcache::restart::PendingTakeover> SuccessorWaiting(
    lmcache::restart::TakeoverService* takeover) {
  std::optional<lmcache::restart::PendingTakeover> successor;
  if (takeover != nullptr) successor = takeover->Take();
  if (!successor) spdlog::warn("SIGUSR1 with no successor waiting for the pool: ignored");
  return successor;
}

// The drain after a SIGTERM: returns when the workers left and the queues are
// empty, the timeout passed, another signal asks to exit at once, or a
// successor asked for the pool (then in *successor).
void Drain(const sigset_t& signals, lmcache::server::Service& service,
           lmcache::tier::L2Tier* l2, double timeout_seconds,
           lmcache::restart::TakeoverService* takeover,
           std::optional<lmcache::restart::PendingTakeover>* successor) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    const lmcache::server::StatsSnapshot s = service.Snapshot();
    const bool l2_idle = l2 == nullptr || (s.l2->store.queued_objects == 0 && s.l2->store.in_flight == 0);
    if (s.instances.instances == 0 && s.transport.queued_requests == 0 && l2_idle) {
      spdlog::info("drained: no registered worker, nothing queued");
      return;
    }
    const int again = NextSignal(signals, std::chrono::milliseconds(200));
    if (again == SIGUSR1) {
      if ((*successor = SuccessorWaiting(takeover))) {
        spdlog::info("a successor asked for the pool during the drain: handing over instead");
        return;
      }
    } else if (again != 0) {
      spdlog::warn("{} during the drain: exiting now", again == SIGINT ? "SIGINT" : "SIGTERM");
      return;
    }
  }
  spdlog::warn("drain timeout ({} s) passed with {} workers still registered; exiting",
               timeout_seconds, service.instances().size());
}

lmcache::restart::PoolGeometry GeometryOf(const lmcache::daemon::ServerConfig& config) {
  return {config.l1.shm_name,
          config.l1.size_bytes,
          config.l1.allocator.align_bytes,
          config.l1.allocator.page_bytes,
          config.l1.allocator.slab_target_bytes,
          config.chunk_size};
}

// The successor's first step: the running server's pool, or nullopt for a
// cold start (nobody to take over from, or it stepped down for one).
lmcache::Result<std::optional<lmcache::restart::Inheritance>> AskForThePool(
    lmcache::daemon::ServerConfig& config) {
  lmcache::restart::TakeoverHello hello;
  hello.geometry = GeometryOf(config);
  if (!config.shm_name_given) hello.geometry.shm_name.clear();  // it takes the running one's
  hello.cold_if_incompatible = config.takeover == "if-compatible";
  spdlog::info("takeover: asking the server on {} for its pool (waiting up to {} s for its drain)",
               config.takeover_socket_path, config.takeover_timeout_seconds);
  const auto asked = std::chrono::steady_clock::now();
  LMC_ASSIGN_OR_RETURN(
      std::optional<lmcache::restart::Inheritance> inheritance,
      lmcache::restart::RequestTakeover(
          config.takeover_socket_path, hello,
          std::chrono::milliseconds(static_cast<std::int64_t>(config.takeover_timeout_seconds * 1000))));
  if (!inheritance) {
    spdlog::info("takeover: no server hands a pool over on {}; starting cold",
                 config.takeover_socket_path);
    return inheritance;
  }
  spdlog::info("takeover: received the pool's descriptor and index ({} objects, {} slots held, "
               "{} registrations) {:.3f} s after asking",
               inheritance->image.pool.table.resident.size(),
               inheritance->image.pool.table.held.size(), inheritance->image.registrations.size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count());
  if (!config.shm_name_given) {
    config.l1.shm_name = inheritance->image.shm_name;
  }
  return inheritance;
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

// The successor's adoption of the pool it was handed, acknowledged to the
// predecessor once it holds (from then on the pool's name is this server's).
lmcache::Result<std::unique_ptr<lmcache::store::L1Cache>> AdoptThePool(
    const lmcache::daemon::ServerConfig& config, const lmcache::Clock& clock,
    lmcache::restart::Inheritance& inheritance, lmcache::server::RestartStats* restart) {
  lmcache::store::AdoptionReport report;
  const auto adopting = std::chrono::steady_clock::now();
  LMC_ASSIGN_OR_RETURN(auto cache,
                       lmcache::store::L1Cache::Adopt(config.l1, &clock,
                                                      std::move(inheritance.segment),
                                                      inheritance.image.pool, &report));
  spdlog::info("takeover: adopted the pool in place in {:.3f} s",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - adopting).count());
  restart->took_over = true;
  restart->adopted_objects = report.objects;
  restart->adopted_bytes = report.bytes;
  restart->adopted_read_locked = report.read_locked;
  restart->dropped_staged = report.held_slots;
  restart->dropped_staged_bytes = report.held_bytes;
  LMC_RETURN_IF_ERROR(lmcache::restart::Acknowledge(inheritance));
  return cache;
}

// --recover-pool: the pool a crashed predecessor left, adopted in place with
// every object its journal proves intact; nullptr (start cold) when there is
// nothing to recover or it cannot be.
std::unique_ptr<lmcache::store::L1Cache> RecoverThePool(const lmcache::daemon::ServerConfig& config,
                                                        const lmcache::Clock& clock,
                                                        lmcache::server::RestartStats* restart) {
  const auto started = std::chrono::steady_clock::now();
  lmcache::store::RecoveryReport report;
  auto recovered = lmcache::store::L1Cache::Recover(config.l1, &clock, &report);
  if (!recovered.ok()) {
    if (recovered.status().code() == lmcache::ErrorCode::kNotFound) {
      spdlog::info("recovery: no pool {} with a journal to recover; starting cold",
                   config.l1.shm_name);
    } else {
      spdlog::warn("recovery: cannot recover the pool {}: {}; starting cold", config.l1.shm_name,
                   recovered.status().message());
    }
    return nullptr;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  restart->recovered = true;
  restart->recovered_objects = report.objects;
  restart->recovered_bytes = report.bytes;
  restart->recovery_held_slots = report.held_slots;
  restart->recovery_held_bytes = report.held_bytes;
  restart->recovery_unsealed = report.unsealed;
  restart->recovery_checksum_mismatches = report.checksum_mismatches;
  restart->recovery_seconds = seconds;
  spdlog::info("crash recovery: recovered pool {} in {:.3f} s: {} objects ({:.2f} GiB) verified "
               "and served again; {} slots held from reuse, a write TTL at most ({} staged, {} "
               "not yet checksummed, {} changed since their checksum, {} superseded, {} "
               "undecodable; {} whose hold from an earlier recovery had ended freed); {} records "
               "outside any slab dropped",
               config.l1.shm_name, seconds, report.objects,
               static_cast<double>(report.bytes) / static_cast<double>(lmcache::kGiB),
               report.held_slots, report.staged, report.unsealed, report.checksum_mismatches,
               report.superseded, report.undecodable, report.holds_ended, report.outside_slabs);
  return std::move(recovered).value();
}

// The predecessor's last act, once nothing of it writes the pool any more
// (requests, the L2 tier and the maintenance stopped; StopAndExport stops the
// pre-faulter and the evictor): the image and the segment to the successor,
// or, for a cold successor, only the verdict. Returns the exit code.
int HandOverThePool(const lmcache::daemon::ServerConfig& config,
                    lmcache::server::Service& service, lmcache::store::L1Cache& cache,
                    lmcache::restart::PendingTakeover& successor) {
  const auto started = std::chrono::steady_clock::now();
  const auto seconds = [&started] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  lmcache::restart::HandoverImage image;
  if (!successor.cold) {
    image = {service.boot_id(), config.l1.shm_name, cache.StopAndExport(),
             service.CarriedRegistrations()};
    spdlog::info("takeover: exported the pool's index in {:.3f} s", seconds());
  }
  const lmcache::Status handed = lmcache::restart::HandOver(
      successor, cache.segment().fd(), image,
      std::chrono::milliseconds(static_cast<std::int64_t>(config.takeover_timeout_seconds * 1000)));
  if (!handed.ok()) {
    spdlog::error("takeover failed: {}; the pool is removed", handed.message());
    return 1;
  }
  if (!successor.cold) {
    cache.Disown();
    spdlog::info("handed pool {} over: {} objects, {} staged copies, {} registrations, in {:.3f} s; "
                 "the successor serves it",
                 config.l1.shm_name, image.pool.table.resident.size(),
                 image.pool.table.held.size(), image.registrations.size(), seconds());
  }
  return 0;
}

void WatchLoops(lmcache::admin_http::Health& health, lmcache::transport::RouterLoop* router,
                lmcache::store::L1Cache& l1, lmcache::server::Service& service) {
  health.Watch("the request loop", [router] { return router->last_heartbeat_ms(); }, 10'000);
  const lmcache::store::EvictorStats evictor = l1.evictor().Stats();
  const TimeMs evictor_silence = std::max<TimeMs>(30'000, 10 * evictor.interval_ms);
  health.Watch("the evictor", [&l1] { return l1.evictor().Stats().last_run_ms; }, evictor_silence);
  const TimeMs maintenance_silence =
      std::max<TimeMs>(60'000, 10 * static_cast<TimeMs>(service.maintenance().period().count()));
  health.Watch("the maintenance thread", [&service] { return service.maintenance().last_run_ms(); },
               maintenance_silence);
  // A transfer mode that cannot work (the L1 pool could not be pinned for the GPU).
  health.Require([&service] { return service.TransferProblem(); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lmcache-server: a KV-cache daemon for LLM inference (LMCache MP protocol)",
               "lmcache-server"};
  lmcache::daemon::ServerConfig config;
  lmcache::daemon::AddFlags(app, &config);
  app.set_version_flag("--version", std::string("lmcache-server ") + lmcache::kVersion);
  CLI11_PARSE(app, argc, argv);

  lmcache::LogOptions log;
  log.level = config.log_level;
  log.file = config.log_file;
  if (auto format = lmcache::ParseLogFormat(config.log_format); format.ok()) log.format = *format;
  if (auto status = lmcache::InitLogging(log); !status.ok()) {
    std::fprintf(stderr, "lmcache-server: %s\n", status.message().c_str());
    return 2;
  }
  if (auto status = lmcache::daemon::Finalize(&config, getpid()); !status.ok()) {
    spdlog::critical("invalid configuration: {}", status.message());
    return 2;
  }
  for (const std::string& notice : config.notices) spdlog::warn("{}", notice);
  const sigset_t signals = BlockHandledSignals();
  const lmcache::Clock& clock = lmcache::SteadyClock::Instance();

  // A successor asks for the pool before it binds anything: the running
  // server holds the endpoints until it hands over.
  const auto takeover_started = std::chrono::steady_clock::now();
  std::optional<lmcache::restart::Inheritance> inheritance;
  if (config.takeover != "off") {
    auto asked = AskForThePool(config);
    if (!asked.ok()) {
      spdlog::critical("cannot take over: {}", asked.status().message());
      return 1;
    }
    inheritance = std::move(asked).value();
  }
  std::unique_ptr<lmcache::store::L1Cache> adopted_cache;
  lmcache::server::RestartStats restart;
  if (inheritance) {
    auto adopted = AdoptThePool(config, clock, *inheritance, &restart);
    if (!adopted.ok()) {
      // The predecessor sees the connection close without an acknowledgement.
      spdlog::critical("cannot take over the pool: {}", adopted.status().message());
      return 1;
    }
    adopted_cache = std::move(adopted).value();
  }

  // Endpoints first: a second server refused here has touched nothing.
  auto loop = BindEndpoints(config.router, inheritance.has_value());
  if (!loop.ok()) {
    spdlog::critical("cannot start: {}", loop.status().message());
    return 1;
  }
  lmcache::Result<std::unique_ptr<lmcache::store::L1Cache>> cache = std::move(adopted_cache);
  if (!inheritance && config.recover_pool) {
    if (auto recovered = RecoverThePool(config, clock, &restart)) cache = std::move(recovered);
  }
  if (!inheritance && !restart.recovered) {
    spdlog::info("creating L1 pool /dev/shm/{} of {:.2f} GiB", config.l1.shm_name,
                 static_cast<double>(config.l1.size_bytes) / static_cast<double>(lmcache::kGiB));
    cache = lmcache::store::L1Cache::Create(config.l1, &clock);
  }
  if (!cache.ok()) {
    spdlog::critical("cannot start: {}", cache.status().message());
    return 1;
  }
  // The L2 tier and the KV events subscribe to the table before anything is stored.
  std::unique_ptr<lmcache::tier::L2Tier> l2;
  if (!config.l2.adapters.empty()) {
    auto built = lmcache::tier::L2Tier::Create(config.l2, &(*cache)->table());
    if (!built.ok()) {
      spdlog::critical("cannot start: {}", built.status().message());
      return 1;
    }
    l2 = std::move(built).value();
  }
  lmcache::events::KvEvents kv_events(config.events, static_cast<std::uint32_t>(config.chunk_size));
  std::unique_ptr<lmcache::events::VllmEventPublisher> kv_publisher;
  if (kv_events.enabled()) {
    (*cache)->table().AddListener(&kv_events.recorder());
    if (l2) {
      kv_events.recorder().SetL2Locations(l2->AdapterDescriptions());
      l2->SetEventObserver(&kv_events.recorder());
    }
    if (config.kv_publisher) {
      auto started = lmcache::events::VllmEventPublisher::Start(*config.kv_publisher, &kv_events.log());
      if (!started.ok()) {
        spdlog::critical("cannot start: {}", started.status().message());
        return 1;
      }
      kv_publisher = std::move(started).value();
      spdlog::info("publishing KV events in vLLM's format on {}{}", kv_publisher->endpoint(),
                   kv_publisher->replay_endpoint().empty()
                       ? ""
                       : " (replay on " + kv_publisher->replay_endpoint() + ")");
    }
  }
  if (l2) l2->Start();
  lmcache::server::Service service(cache->get(), &clock, config.service,
                                   l2 ? l2->prefetcher() : nullptr,
                                   &kv_events);
  lmcache::transport::RouterLoop* router = loop->get();
  service.SetTransportStatsSource([router] { return router->Stats(); });
  if (l2) service.SetL2StatsSource([tier = l2.get()] { return tier->Stats(); });
  if (kv_publisher) {
    service.SetKvPublisherStatsSource([publisher = kv_publisher.get()] { return publisher->Stats(); });
  }

  lmcache::admin_http::Health health(&clock);
  WatchLoops(health, router, **cache, service);
  if (config.ready_prefault_fraction > 0) {
    health.Require([&cache, fraction = config.ready_prefault_fraction]()
                       -> std::optional<std::string> {
      const auto p = (*cache)->prefault();
      const double done = p.total_bytes ? static_cast<double>(p.ready_bytes) /
                                              static_cast<double>(p.total_bytes)
                                        : 1;
      if (p.done || done >= fraction) return std::nullopt;
      return "pre-faulting the pool: " + std::to_string(static_cast<int>(done * 100)) + "% of " +
             std::to_string(static_cast<int>(fraction * 100)) + "% needed";
    });
  }
  std::unique_ptr<lmcache::admin_http::HttpServer> http;
  if (config.http_port != 0) {
    lmcache::admin_http::HttpConfig http_config;
    http_config.host = config.http_host;
    http_config.port = config.http_port;
    http_config.read_only = config.http_read_only;
    http_config.admin_token = config.http_admin_token;
    http_config.admin_open = config.http_admin_open;
    auto started = lmcache::admin_http::HttpServer::Start(http_config, &service, &health);
    if (!started.ok()) {
      spdlog::critical("cannot start: {}", started.status().message());
      return 1;
    }
    http = std::move(started).value();
  }

  if (inheritance) {
    restart.carried_registrations = service.AdoptRegistrations(inheritance->image.registrations);
  }
  // Listens for a successor once the pool is this server's.
  std::unique_ptr<lmcache::restart::TakeoverService> takeover;
  if (!config.takeover_socket_path.empty()) {
    auto started = lmcache::restart::TakeoverService::Start(
        config.takeover_socket_path, GeometryOf(config), [] { kill(getpid(), SIGUSR1); });
    if (!started.ok()) {
      spdlog::critical("cannot start: {}", started.status().message());
      return 1;
    }
    takeover = std::move(started).value();
  }

  service.StartMaintenance();
  std::thread loop_thread([router, &service] { router->Run(&service); });
  health.SetPhase(lmcache::admin_http::Phase::kServing);
  if (restart.recovered) service.SetRestartStats(restart);
  if (inheritance) {
    restart.takeover_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                             takeover_started)
                                   .count();
    service.SetRestartStats(restart);
    spdlog::info(
        "warm restart: took pool {} over from server {}: adopted {} objects ({:.2f} GiB), {} of "
        "them read-locked (kept for a read lease); dropped {} staged copies (held from reuse "
        "for a write lease); carried {} registrations; serving {:.3f} s after asking",
        config.l1.shm_name, inheritance->image.boot_id, restart.adopted_objects,
        static_cast<double>(restart.adopted_bytes) / static_cast<double>(lmcache::kGiB),
        restart.adopted_read_locked, restart.dropped_staged, restart.carried_registrations,
        restart.takeover_seconds);
    inheritance.reset();
  }
  spdlog::info(
      "lmcache-server ready: serving {}{} | L1 pool {} ({} bytes) | chunk {} tokens | "
      "boot id {} | pid {}",
      Join((*loop)->endpoints()),
      http ? " | http://" + config.http_host + ":" + std::to_string(http->port()) : "",
      config.l1.shm_name, config.l1.size_bytes, config.chunk_size, service.boot_id(), getpid());

  int first = 0;
  std::optional<lmcache::restart::PendingTakeover> successor;
  while (true) {
    first = WaitForShutdown(signals);
    if (first != SIGUSR1 || (successor = SuccessorWaiting(takeover.get()))) break;
  }
  if (!successor && first == SIGTERM && config.drain_timeout_seconds > 0) {
    // Refusing first, then the line: whoever reads "draining" in the log
    // (an operator, a test) sees registrations refused and a 503 health.
    service.SetDraining(true);
    health.SetPhase(lmcache::admin_http::Phase::kDraining);
    spdlog::info("SIGTERM: draining (new registrations refused, up to {} s)",
                 config.drain_timeout_seconds);
    // A successor that asks meanwhile gets the pool: the drain ends there.
    Drain(signals, service, l2.get(), config.drain_timeout_seconds, takeover.get(), &successor);
  } else if (!successor) {
    spdlog::info("received {}; shutting down", first == SIGINT ? "SIGINT" : "SIGTERM");
  }
  if (successor) {
    spdlog::info("takeover: a successor asked for the pool{}; stopping",
                 successor->cold ? " (it starts cold: " + successor->mismatch + ")" : "");
  }
  takeover.reset();  // no second successor
  health.SetPhase(lmcache::admin_http::Phase::kDraining);
  // Waits parked without a thread are answered while the transport still
  // sends (nil: "still loading"); none parks after this.
  service.AnswerParked();
  if (successor && !successor->cold) {
    (*loop)->StopRefusing(lmcache::Status(
        lmcache::ErrorCode::kUnavailable,
        "this server is handing its pool over to its successor: retry, the successor answers "
        "on the same endpoint in a moment"));
  } else {
    (*loop)->Stop();
  }
  loop_thread.join();
  const lmcache::server::TransportStats traffic = (*loop)->Stats();
  spdlog::info("served {} requests: {} replies sent, {} refused before dispatch ({} overloaded), "
               "{} undeliverable",
               traffic.received, traffic.replied, traffic.refused, traffic.overloaded,
               traffic.undeliverable);
  if (http) http->Stop();
  loop->reset();
  service.StopMaintenance();
  if (l2) l2->Stop();  // no lock of the L2 tier outlives it
  kv_publisher.reset();
  const int exit_code = successor ? HandOverThePool(config, service, **cache, *successor) : 0;
  const bool kept = successor && !successor->cold && exit_code == 0;
  if (kept && config.after_handover == "wait") {
    // A pod whose container exits is restarted, and would take the pool
    // back: it stays until its controller deletes it (SIGTERM).
    spdlog::info("handed over; waiting for SIGTERM without serving (--after-handover wait)");
    while (true) {
      const int signal_number = WaitForShutdown(signals);
      if (signal_number == SIGTERM || signal_number == SIGINT) break;
    }
  }
  cache->reset();
  spdlog::info("L1 pool {} {}; bye", config.l1.shm_name, kept ? "left to the successor" : "removed");
  return exit_code;
}
