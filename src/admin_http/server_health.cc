#include "admin_http/server_health.h"

#include <algorithm>
#include <optional>
#include <string>

#include "stats/ratio.h"

namespace lmcache::admin_http {
namespace {

void WatchLoops(Health& health, transport::RouterLoop& router, store::L1Cache& l1,
                server::Service& service) {
  health.Watch(
      "the request loop", [&router] { return router.last_heartbeat_ms(); }, 10'000);
  const TimeMs evictor_silence = std::max<TimeMs>(30'000, 10 * l1.evictor().Stats().interval_ms);
  health.Watch(
      "the evictor", [&l1] { return l1.evictor().Stats().last_run_ms; }, evictor_silence);
  const TimeMs maintenance_silence =
      std::max<TimeMs>(60'000, 10 * static_cast<TimeMs>(service.maintenance().period().count()));
  health.Watch(
      "the maintenance thread", [&service] { return service.maintenance().last_run_ms(); },
      maintenance_silence);
}

}  // namespace

void WatchServer(Health& health, transport::RouterLoop& router, store::L1Cache& l1,
                 server::Service& service, double ready_prefault_fraction) {
  WatchLoops(health, router, l1, service);
  // A transfer mode that cannot work (the L1 pool could not be pinned for the GPU).
  health.Require([&service] { return service.TransferProblem(); });
  // An endpoint that cannot accept connections (out of descriptors) cannot
  // take a new worker: not healthy until it has accepted again for 10 s.
  health.Require([&router]() -> std::optional<std::string> {
    const TimeMs failed = router.last_accept_failure_ms();
    if (failed == 0 || SteadyClock::Instance().NowMs() - failed > 10'000) return std::nullopt;
    return "an endpoint failed to accept a connection in the last 10 s (out of file "
           "descriptors?): see accept_failures in /status";
  });
  if (ready_prefault_fraction <= 0) return;
  health.Require([&l1, fraction = ready_prefault_fraction]() -> std::optional<std::string> {
    const store::PrefaultProgress p = l1.prefault();
    const double done = stats::UsedRatio(p.ready_bytes, p.total_bytes).value_or(1);
    if (p.done || done >= fraction) return std::nullopt;
    return "pre-faulting the pool: " + std::to_string(static_cast<int>(done * 100)) + "% of " +
           std::to_string(static_cast<int>(fraction * 100)) + "% needed";
  });
}

}  // namespace lmcache::admin_http
