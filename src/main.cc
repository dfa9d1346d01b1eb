// lmcache-server: parse flags, build the L1 cache, serve until SIGINT/SIGTERM,
// then shut down in order (the pool segment is unlinked on the way out).
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "common/clock.h"
#include "common/logging.h"
#include "common/system_info.h"
#include "server/config.h"
#include "store/l1_cache.h"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lmcache-server: a KV-cache daemon for LLM inference (LMCache MP protocol)",
               "lmcache-server"};
  lmcache::server::ServerConfig config;
  lmcache::server::AddFlags(app, &config);
  app.set_version_flag("--version", "lmcache-server 0.1.0");
  CLI11_PARSE(app, argc, argv);

  if (auto status = lmcache::InitLogging(config.log_level); !status.ok()) {
    std::fprintf(stderr, "lmcache-server: %s\n", status.message().c_str());
    return 2;
  }
  if (auto status = lmcache::server::Finalize(&config, getpid()); !status.ok()) {
    spdlog::critical("invalid configuration: {}", status.message());
    return 2;
  }
  const sigset_t shutdown_signals = BlockShutdownSignals();

  spdlog::info("creating L1 pool /dev/shm/{} of {:.2f} GiB", config.l1.shm_name,
               static_cast<double>(config.l1.size_bytes) / static_cast<double>(lmcache::kGiB));
  auto cache = lmcache::store::L1Cache::Create(config.l1, &lmcache::SteadyClock::Instance());
  if (!cache.ok()) {
    spdlog::critical("cannot start: {}", cache.status().message());
    return 1;
  }
  spdlog::info("lmcache-server ready: L1 pool {} ({} bytes), eviction {} at {:.2f}, pid {}",
               config.l1.shm_name, config.l1.size_bytes, config.eviction_policy,
               config.eviction_trigger_watermark, getpid());

  int signal_number = 0;
  sigwait(&shutdown_signals, &signal_number);
  spdlog::info("received {}; shutting down", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  cache->reset();
  spdlog::info("L1 pool {} removed; bye", config.l1.shm_name);
  return 0;
}
