// lmcache-server: parse flags, bind the endpoints (before touching any pool
// segment, so a duplicate start harms nothing), build the L1 cache, the L2
// tier and the service, serve ZMQ and HTTP until a signal, then shut down in
// order (the pool segment is unlinked on the way out).
//
// Signals: SIGTERM drains (health 503, new registrations refused, registered
// workers served until they leave or --drain-timeout-seconds passes, queued
// writes to L2 flushed), then exits 0; a second SIGTERM or a SIGINT exits at
// once; SIGHUP reopens the log file.
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

// Waits for the first SIGTERM or SIGINT; returns it.
int WaitForShutdown(const sigset_t& signals) {
  while (true) {
    if (const int s = NextSignal(signals, std::chrono::milliseconds(1000)); s != 0) return s;
  }
}

// The drain after a SIGTERM: returns when the workers left and the queues are
// empty, the timeout passed, or another signal asks to exit at once.
void Drain(const sigset_t& signals, lmcache::server::Service& service,
           lmcache::tier::L2Tier* l2, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    const lmcache::server::StatsSnapshot s = service.Snapshot();
    const bool l2_idle = l2 == nullptr || (s.l2->store.queued_objects == 0 && s.l2->store.in_flight == 0);
    if (s.instances.instances == 0 && s.transport.queued_requests == 0 && l2_idle) {
      spdlog::info("drained: no registered worker, nothing queued");
      return;
    }
    if (const int again = NextSignal(signals, std::chrono::milliseconds(200)); again != 0) {
      spdlog::warn("{} during the drain: exiting now", again == SIGINT ? "SIGINT" : "SIGTERM");
      return;
    }
  }
  spdlog::warn("drain timeout ({} s) passed with {} workers still registered; exiting",
               timeout_seconds, service.instances().size());
}

void WatchLoops(lmcache::ops::Health& health, lmcache::transport::RouterLoop* router,
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

  // Endpoints first: a second server refused here has touched nothing.
  auto loop = lmcache::transport::RouterLoop::Create(config.router);
  if (!loop.ok()) {
    spdlog::critical("cannot start: {}", loop.status().message());
    return 1;
  }
  spdlog::info("creating L1 pool /dev/shm/{} of {:.2f} GiB", config.l1.shm_name,
               static_cast<double>(config.l1.size_bytes) / static_cast<double>(lmcache::kGiB));
  auto cache = lmcache::store::L1Cache::Create(config.l1, &clock);
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

  lmcache::ops::Health health(&clock);
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
  std::unique_ptr<lmcache::ops::HttpServer> http;
  if (config.http_port != 0) {
    lmcache::ops::HttpConfig http_config;
    http_config.host = config.http_host;
    http_config.port = config.http_port;
    http_config.read_only = config.http_read_only;
    http_config.admin_token = config.http_admin_token;
    http_config.admin_open = config.http_admin_open;
    auto started = lmcache::ops::HttpServer::Start(http_config, &service, &health);
    if (!started.ok()) {
      spdlog::critical("cannot start: {}", started.status().message());
      return 1;
    }
    http = std::move(started).value();
  }

  service.StartMaintenance();
  std::thread loop_thread([router, &service] { router->Run(&service); });
  health.SetPhase(lmcache::ops::Phase::kServing);
  spdlog::info(
      "lmcache-server ready: serving {}{} | L1 pool {} ({} bytes) | chunk {} tokens | "
      "boot id {} | pid {}",
      Join((*loop)->endpoints()),
      http ? " | http://" + config.http_host + ":" + std::to_string(http->port()) : "",
      config.l1.shm_name, config.l1.size_bytes, config.chunk_size, service.boot_id(), getpid());

  const int first = WaitForShutdown(signals);
  if (first == SIGTERM && config.drain_timeout_seconds > 0) {
    spdlog::info("SIGTERM: draining (new registrations refused, up to {} s)",
                 config.drain_timeout_seconds);
    health.SetPhase(lmcache::ops::Phase::kDraining);
    service.SetDraining(true);
    Drain(signals, service, l2.get(), config.drain_timeout_seconds);
  } else {
    spdlog::info("received {}; shutting down", first == SIGINT ? "SIGINT" : "SIGTERM");
  }
  health.SetPhase(lmcache::ops::Phase::kDraining);
  // Waits parked without a thread are answered while the transport still
  // sends (nil: "still loading"); none parks after this.
  service.AnswerParked();
  (*loop)->Stop();
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
  cache->reset();
  spdlog::info("L1 pool {} removed; bye", config.l1.shm_name);
  return 0;
}
