// OpenPool and HandOverPool: the one place that decides where a server's L1
// pool comes from and where it goes (docs/architecture.md, "Restarts and
// upgrades").
//
// A pool is opened in one of three ways, tried in this order:
//   taken over  --takeover: the running server on the takeover socket hands
//               its segment and index over (takeover.h); adopted in place and
//               acknowledged before this server binds anything;
//   recovered   --recover-pool: the segment a dead server left, adopted in
//               place with every object its journal proves intact
//               (pool_recovery.h);
//   cold        a new segment.
// With --recover-pool the pool is journaled however it was opened
// (pool_journal.h); without it, a journal an earlier run left is removed.
// HandOverPool is the other end: the predecessor's last act once nothing of
// it writes the pool any more.
//
// Like CacheLib's new-or-attach constructors and memcached's restart.c, the
// choice is made here once; each part checks its own piece of the geometry
// (takeover: name, pool layout, chunk size; the journal: pool layout and the
// segment file).
//
// Thread-safety: called by the main thread only, before serving (OpenPool,
// FinishOpening) and after it stopped (HandOverPool).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "lmcache/status.h"
#include "restart/takeover.h"
#include "server/service.h"
#include "server/stats.h"
#include "store/l1_cache.h"

namespace lmcache::restart {

enum class TakeoverMode { kOff, kOn, kIfCompatible };

struct RestartConfig {
  TakeoverMode takeover = TakeoverMode::kOff;
  std::string socket_path;  // "" = no takeover socket (nobody can take this pool over)
  std::chrono::milliseconds timeout{120'000};  // for the predecessor's drain and the handover
  bool shm_name_given = false;  // false: a successor takes its predecessor's pool name
  bool recover_pool = false;    // journal the pool; adopt a dead predecessor's at start
  store::ChunkSizes chunk_sizes;  // part of the geometry a takeover checks
};

enum class PoolOrigin { kCold, kTakenOver, kRecovered };
const char* PoolOriginName(PoolOrigin origin);  // "cold", "taken over", "recovered"

struct OpenedPool {
  std::unique_ptr<store::L1Cache> cache;
  PoolOrigin origin = PoolOrigin::kCold;
  server::RestartStats stats;  // what FinishOpening gives the service
  // Taken over: the predecessor's boot id and the workers' registrations it
  // carried along with the pool.
  std::string predecessor_boot_id;
  std::vector<worker::CarriedRegistration> registrations;
  std::chrono::steady_clock::time_point started;  // OpenPool's call
};

// Opens the pool `*l1` describes (a successor without --shm-name learns the
// predecessor's pool name into l1->shm_name). `bind` binds the server's
// endpoints: it is called once the takeover question is settled and before
// a cold or recovered pool is touched, so a second server refused there
// (its endpoints taken) has harmed nothing; `after_takeover` tells it the
// predecessor has just released them. An error from `bind`, a refused
// takeover or a pool that cannot be made is returned, and the server must
// not start.
Result<OpenedPool> OpenPool(store::L1Config* l1, const RestartConfig& config, const Clock& clock,
                            const std::function<Status(bool after_takeover)>& bind);

// Just before serving: carries the predecessor's registrations into
// `service`, hands it the restart's figures and logs how the pool came.
void FinishOpening(OpenedPool& pool, server::Service& service);

// What a successor's hello must match to be handed a pool of `l1`.
TakeoverGeometry TakeoverGeometryOf(const store::L1Config& l1,
                                    const store::ChunkSizes& chunk_sizes);

// The predecessor's last act, once nothing of it writes the pool any more
// (requests, the L2 tier and the maintenance stopped; StopAndExport stops
// the pre-faulter and the evictor): the image and the segment to the
// successor, or, for a cold successor, only the verdict. OK means the
// successor owns the pool (unless it starts cold); on an error the pool is
// removed with this server.
Status HandOverPool(PendingTakeover& successor, store::L1Cache& cache,
                    server::Service& service, std::chrono::milliseconds timeout);

}  // namespace lmcache::restart
