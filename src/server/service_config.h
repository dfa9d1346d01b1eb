// ServiceConfig: the service's settings (filled from the flags by
// daemon/config). The counters that are not per operation are
// ServiceCounters, declared with their figures in server/stats.h.
//
// Thread-safety: immutable once the service is built.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "common/clock.h"
#include "fleet/ucx_descriptor.h"
#include "protocol/wire_codec.h"
#include "server/parked_requests.h"
#include "server/stats.h"
#include "store/chunk_sizes.h"
#include "worker/instances.h"
#include "worker/session.h"

namespace lmcache::server {

// Who may run destructive operations (clear), --admin-ops.
enum class AdminAccess : std::uint8_t {
  kAny,    // every connection
  kLocal,  // ipc sockets and tcp peers on a loopback address
  kIpc,    // ipc sockets only (the default): their 0600 mode decides who
  kOff,    // nobody
};

struct ServiceConfig {
  // --chunk-size (the default and minimum) and --model-chunk-size.
  store::ChunkSizes chunk_sizes;
  worker::SessionLimits sessions;         // --session-ttl-seconds, --session-memory-mb
  TimeMs worker_reap_timeout_ms = 120'000;          // --worker-reap-timeout-seconds; 0 = never
  TimeMs worker_registration_grace_ms = 3'600'000;  // --worker-registration-grace-seconds
  protocol::KeyLimits key_limits;                   // tokens per key (a 16 MiB msgpack array)
  std::size_t hash_cache_bytes = 64u << 20;         // --hash-cache-mb
  std::size_t max_pending_transfers = 16384;        // per instance and direction
  ParkedLimits parked;  // requests waiting without a thread, per client and in all
  AdminAccess admin_access = AdminAccess::kIpc;
  std::string instance_id;  // --instance-id, shown by server_info
  // --prefill-tokens-per-second: how fast each model's engine recomputes a
  // prompt; "*" for every model not named. A lookup of a model with a rate
  // loads from L2 only the prefix whose load is faster than recomputing it
  // (tier/load_cost.h); without one, everything found is loaded.
  std::map<std::string, double> prefill_tokens_per_second;
  // --supported-transfer-mode: "auto" (every mode), "engine_driven" or "lmcache_driven".
  std::string transfer_mode = "auto";
  std::string gpu_backend = "cuda";          // --gpu-backend
  std::int64_t gpu_event_timeout_ms = 10'000;  // --gpu-event-timeout-ms
  // A peer's lookup it never queried within this is reaped with its locks
  // (--p2p-lookup-timeout, the reference's name and default).
  TimeMs p2p_lookup_timeout_ms = 30'000;
  // The fraction of the pool that peers' lookups may hold locked together
  // (--p2p-max-locked-fraction): one member cannot lock the whole pool.
  double p2p_max_locked_fraction = 0.5;
  // Whether p2p_lookup_and_lock from a connection that did not prove the
  // fleet key (every connection but the fleet endpoint's) is served: the
  // reference's open behaviour, for fleets mixed with reference servers
  // (--p2p-allow-unauthenticated). Off: such a lookup gets only misses.
  bool p2p_serve_unauthenticated = false;
  // P2P as /status shows it (empty when off): the advertised fleet endpoint
  // and the fleet key's fingerprint.
  std::string p2p_advertise_url;
  std::string p2p_key_fingerprint;
  // This server's UCX data channel (fleet/ucx_channel.h), which server_info
  // announces to fleet members only; size 0 when P2P is off.
  fleet::UcxDescriptor p2p_data_channel;
};

}  // namespace lmcache::server
