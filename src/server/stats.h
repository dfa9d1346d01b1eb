// StatsSnapshot: every counter and gauge of the server, collected once and
// rendered by each exporter (the msgpack `stats` operation here, Prometheus
// text over HTTP) from one schema (stats_schema.h), so no figure is counted
// twice or exported by one and not the other.
//
// Thread-safety: a snapshot is a plain value taken from internally
// synchronised sources; rendering is a pure function.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "alloc/slab_allocator.h"
#include "common/histogram.h"
#include "events/kv_event_log.h"
#include "events/kv_event_recorder.h"
#include "events/vllm_publisher.h"
#include "worker/chunk_hasher.h"
#include "gpu/gpu_contexts.h"
#include "worker/instances.h"
#include "server/kv_event_streams.h"
#include "server/parked_requests.h"
#include "server/request.h"
#include "store/evictor.h"
#include "store/flow_counters.h"
#include "store/l1_cache.h"
#include "store/object_table.h"
#include "tier/l2_tier.h"

namespace lmcache::server {

struct OperationStats {
  std::string name;
  std::uint64_t requests = 0;
  std::uint64_t errors = 0;
  LatencyHistogram::Snapshot latency;
};

// The KV event channel: its log, its recorder and the vLLM-format publisher
// (all zero when the channel is off; the publisher's when it is not bound).
struct KvEventsStats {
  events::KvEventLogStats log;
  events::KvEventRecorderStats recorder;
  events::VllmPublisherStats publisher;
  KvEventStreamStats streams;  // subscribe_kv_events
};

// How this server started: cold, or by taking over its predecessor's pool
// (docs/architecture.md, "Restarts and upgrades"). Set once, before serving.
struct RestartStats {
  bool took_over = false;
  std::uint64_t adopted_objects = 0;
  std::uint64_t adopted_bytes = 0;
  std::uint64_t adopted_read_locked = 0;  // kept from eviction for a read TTL
  std::uint64_t dropped_staged = 0;       // staged copies not served, held for a write TTL
  std::uint64_t dropped_staged_bytes = 0;
  std::uint64_t carried_registrations = 0;
  double takeover_seconds = 0;  // from the request to serving
  // --recover-pool: adopted a crashed predecessor's pool (restart/pool_recovery.h).
  bool recovered = false;
  std::uint64_t recovered_objects = 0;
  std::uint64_t recovered_bytes = 0;
  std::uint64_t recovery_held_slots = 0;  // not served; kept from reuse for a write TTL
  std::uint64_t recovery_held_bytes = 0;
  std::uint64_t recovery_unsealed = 0;             // committed, not checksummed at the crash
  std::uint64_t recovery_checksum_mismatches = 0;  // bytes changed after the seal
  double recovery_seconds = 0;
};

struct StatsSnapshot {
  std::string version;
  std::string boot_id;
  double uptime_seconds = 0;
  alloc::AllocatorStats allocator;
  store::TableStats table;
  store::JournalStats journal;  // zero without --recover-pool
  store::FlowStats flow;  // admitted, evicted, deleted
  store::EvictorStats evictor;
  TransportStats transport;
  std::vector<OperationStats> operations;  // one per operation row, in table order
  std::uint64_t refused_requests = 0;      // answered before dispatch (bad frames, unknown op)
  std::size_t sessions = 0;
  std::size_t session_bytes = 0;
  std::uint64_t sessions_dropped_for_memory = 0;
  ParkedStats parked;  // requests waiting without a thread
  worker::RegistryCounts instances;
  // Registrations ended, by cause (ReleaseCause: unregistered, disconnected,
  // reaped, replaced).
  std::array<std::uint64_t, worker::kReleaseCauses> released_instances{};
  worker::ChunkHasherStats hash_cache;
  std::uint64_t lookups = 0;
  std::uint64_t lookup_requested_tokens = 0;
  std::uint64_t lookup_hit_tokens = 0;
  std::uint64_t block_allocation_reports = 0;
  std::optional<tier::L2Stats> l2;  // absent without an L2 tier
  gpu::GpuStats gpu;                     // the CUDA-IPC path
  KvEventsStats kv_events;
  store::L1Cache::PrefaultProgress prefault;
  RestartStats restart;
};

// What GET /status shows: the stats snapshot and the server's identity and
// registrations, taken in one call so the HTTP endpoint reads no service
// internals.
struct ServerStatus {
  StatsSnapshot stats;
  std::string pool_name;        // the L1 segment's shared-memory name
  std::int64_t chunk_size = 0;  // --chunk-size
  std::vector<worker::InstanceInfo> instances;
  std::string instance_id;      // --instance-id, or the boot id when none was given
  std::string eviction_policy;  // --eviction-policy
  double eviction_trigger_watermark = 0;  // --eviction-trigger-watermark
};

// The `stats` reply: a msgpack map (docs/protocol.md lists its fields).
std::string EncodeStatsMsgpack(const StatsSnapshot& stats);

}  // namespace lmcache::server
