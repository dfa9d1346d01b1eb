#include "daemon/drain.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>

#include "daemon/process.h"

namespace lmcache::daemon {

std::optional<restart::PendingTakeover> SuccessorWaiting(restart::TakeoverService* takeover) {
  std::optional<restart::PendingTakeover> successor;
  if (takeover != nullptr) successor = takeover->Take();
  if (!successor) spdlog::warn("SIGUSR1 with no successor waiting for the pool: ignored");
  return successor;
}

void Drain(const sigset_t& signals, server::Service& service, tier::L2Tier* l2,
           double timeout_seconds, restart::TakeoverService* takeover,
           std::optional<restart::PendingTakeover>* successor) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    const server::StatsSnapshot s = service.Snapshot();
    const bool l2_idle =
        l2 == nullptr || (s.l2->store.queued_objects == 0 && s.l2->store.in_flight == 0);
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

}  // namespace lmcache::daemon
