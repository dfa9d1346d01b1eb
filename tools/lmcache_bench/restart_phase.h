// The warm-restart phase of lmcache-bench: how long a successor started with
// --takeover takes to serve a full pool, and how much of it it serves. For
// each pool size, server A is filled to 75 % (below the eviction trigger, so
// it holds every object stored), server B takes over, and every prompt is
// looked up through B; a sample of them is retrieved and its bytes checked.
// Then crash recovery: every server runs with --recover-pool; once B has
// checksummed what it adopted, B is killed with SIGKILL and server C, started
// with --recover-pool on the same pool, is measured the same way.
// Thread-safety: single-threaded use by the driver.
#pragma once

#include <string>
#include <vector>

#include "bench.h"

namespace lmcache::bench {

struct RestartSample {
  double pool_gb = 0;
  std::uint64_t objects = 0;    // what A held when B was started
  double fill_seconds = 0;      // storing them (untimed otherwise)
  double serve_seconds = 0;     // from starting B to its first answer
  double takeover_seconds = 0;  // B's own figure: from asking A to serving
  std::uint64_t adopted_objects = 0;
  double served_fraction = 0;  // chunks B's lookups found / chunks stored
  // How long B's journal still checksummed what it adopted (in the
  // background, from B's start) once B's lookups were done; B is killed then.
  double reseal_seconds = 0;
  double recovery_serve_seconds = 0;  // from starting C (after B's kill -9) to its first answer
  double recovery_seconds = 0;        // C's own figure: journal read, bytes verified, adopted
  double recovered_fraction = 0;      // chunks C's lookups found / chunks stored
};

Result<std::vector<RestartSample>> MeasureRestartPhase(const BenchOptions& options,
                                                       const std::string& server_binary);

}  // namespace lmcache::bench
