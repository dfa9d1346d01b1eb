// lmcache-server: parse flags, bind the endpoints (before touching any pool
// segment, so a duplicate start harms nothing), build the L1 cache and the
// service, serve until SIGINT/SIGTERM, then shut down in order (the pool
// segment is unlinked on the way out).
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/clock.h"
#include "common/logging.h"
#include "common/system_info.h"
#include "common/version.h"
#include "server/config.h"
#include "server/router_loop.h"
#include "server/service.h"
#include "store/l1_cache.h"
#include "tier/l2_tier.h"

namespace {

// Blocks the shutdown signals in this thread before any other starts, so every
// thread inherits the mask and the main thread alone receives them in sigwait.
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : " ") + item;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lmcache-server: a KV-cache daemon for LLM inference (LMCache MP protocol)",
               "lmcache-server"};
  lmcache::server::ServerConfig config;
  lmcache::server::AddFlags(app, &config);
  app.set_version_flag("--version", std::string("lmcache-server ") + lmcache::kVersion);
  CLI11_PARSE(app, argc, argv);

  if (auto status = lmcache::InitLogging(config.log_level); !status.ok()) {
    std::fprintf(stderr, "lmcache-server: %s\n", status.message().c_str());
    return 2;
  }
  if (auto status = lmcache::server::Finalize(&config, getpid()); !status.ok()) {
    spdlog::critical("invalid configuration: {}", status.message());
    return 2;
  }
  for (const std::string& notice : config.notices) spdlog::warn("{}", notice);
  const sigset_t shutdown_signals = BlockShutdownSignals();
  const lmcache::Clock& clock = lmcache::SteadyClock::Instance();

  // Endpoints first: a second server refused here has touched nothing.
  auto loop = lmcache::server::RouterLoop::Create(config.router);
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
  // The L2 tier subscribes to the table before anything is stored.
  std::unique_ptr<lmcache::tier::L2Tier> l2;
  if (!config.l2.adapters.empty()) {
    auto built = lmcache::tier::L2Tier::Create(config.l2, &(*cache)->table());
    if (!built.ok()) {
      spdlog::critical("cannot start: {}", built.status().message());
      return 1;
    }
    l2 = std::move(built).value();
    l2->Start();
  }
  lmcache::server::Service service(cache->get(), &clock, config.service,
                                   l2 ? l2->prefetcher() : nullptr);
  lmcache::server::RouterLoop* router = loop->get();
  service.SetTransportStatsSource([router] { return router->Stats(); });
  if (l2) service.SetL2StatsSource([tier = l2.get()] { return tier->Stats(); });
  service.StartMaintenance();
  std::thread loop_thread([router, &service] { router->Run(&service); });
  spdlog::info(
      "lmcache-server ready: serving {} | L1 pool {} ({} bytes) | chunk {} tokens | "
      "boot id {} | pid {}",
      Join((*loop)->endpoints()), config.l1.shm_name, config.l1.size_bytes, config.chunk_size,
      service.boot_id(), getpid());

  int signal_number = 0;
  sigwait(&shutdown_signals, &signal_number);
  spdlog::info("received {}; shutting down", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  (*loop)->Stop();
  loop_thread.join();
  const lmcache::server::TransportStats traffic = (*loop)->Stats();
  spdlog::info("served {} requests: {} replies sent, {} refused before dispatch ({} overloaded), "
               "{} undeliverable",
               traffic.received, traffic.replied, traffic.refused, traffic.overloaded,
               traffic.undeliverable);
  loop->reset();
  service.StopMaintenance();
  if (l2) l2->Stop();  // no lock of the L2 tier outlives it
  cache->reset();
  spdlog::info("L1 pool {} removed; bye", config.l1.shm_name);
  return 0;
}
