#include "daemon/process.h"

#include <sys/resource.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/logging.h"

namespace lmcache::daemon {

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

int NextSignal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  const timespec wait{static_cast<time_t>(timeout.count() / 1000),
                      static_cast<long>((timeout.count() % 1000) * 1'000'000)};
  const int signal_number = sigtimedwait(&signals, nullptr, &wait);
  if (signal_number != SIGHUP) return signal_number > 0 ? signal_number : 0;
  if (auto reopened = ReopenLogFile(); !reopened.ok()) {
    spdlog::error("SIGHUP: {}", reopened.message());
  } else {
    spdlog::info("SIGHUP: log file reopened");
  }
  return 0;
}

int WaitForShutdown(const sigset_t& signals) {
  while (true) {
    if (const int s = NextSignal(signals, std::chrono::milliseconds(1000)); s != 0) return s;
  }
}

void WaitForTermination(const sigset_t& signals) {
  while (WaitForShutdown(signals) == SIGUSR1) {
  }
}

void RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) {
    spdlog::info("file descriptors: {} (the hard limit)",
                 static_cast<std::uint64_t>(limit.rlim_cur));
    return;
  }
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("file descriptors: cannot raise the soft limit {} to the hard limit {}: {}",
                 static_cast<std::uint64_t>(before), static_cast<std::uint64_t>(limit.rlim_max),
                 std::strerror(errno));
    return;
  }
  spdlog::info("file descriptors: the soft limit raised from {} to the hard limit {}",
               static_cast<std::uint64_t>(before), static_cast<std::uint64_t>(limit.rlim_max));
}

}  // namespace lmcache::daemon
