// StatsSnapshot: every counter and gauge of the server, collected once and
// rendered by each exporter (the msgpack `stats` operation here, Prometheus
// text over HTTP) from one schema (stats_schema.h), so no figure is counted
// twice or exported by one and not the other.
//
// Each component's figures come from its folder's stats header (a struct
// and its list, nothing else), so this header includes no component.
//
// Thread-safety: a snapshot is a plain value taken from internally
// synchronised sources; rendering is a pure function.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "alloc/allocator_stats.h"
#include "common/histogram.h"
#include "events/event_stats.h"
#include "fleet/fleet_stats.h"
#include "gpu/gpu_stats.h"
#include "server/dispatch_stats.h"
#include "stats/declare.h"
#include "store/store_stats.h"
#include "tier/tier_stats.h"
#include "transport/transport_stats.h"
#include "worker/worker_stats.h"

namespace lmcache::server {

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
// RestartStats's figures, each declared once (stats/declare.h).
#define LMC_RESTART_STATS(X, D) \
  X(took_over, "took_over", bool, kGauge, "bool", "restart_took_over", "1 when this server " \
      "took its pool over from its predecessor (--takeover) instead of starting cold.") \
  X(adopted_objects, "adopted_objects", std::uint64_t, kGauge, "objects", \
      "restart_adopted_objects", "Objects the predecessor had committed that this server " \
      "serves again, in place.") \
  X(adopted_bytes, "adopted_bytes", std::uint64_t, kGauge, "bytes", "restart_adopted_bytes", \
      "Aligned bytes of the adopted objects (none was copied).") \
  X(adopted_read_locked, "adopted_read_locked", std::uint64_t, kGauge, "objects", \
      "restart_adopted_read_locked", "Adopted objects a reader held at the handover: kept " \
      "from eviction for a read lease.") \
  X(dropped_staged, "dropped_staged", std::uint64_t, kGauge, "objects", \
      "restart_dropped_staged", "Copies staged but not committed at the handover: never " \
      "served, their memory kept from reuse for a write lease (a worker may still be " \
      "writing it).") \
  X(dropped_staged_bytes, "dropped_staged_bytes", std::uint64_t, kGauge, "bytes", \
      "restart_dropped_staged_bytes", "Bytes of the dropped staged copies.") \
  X(carried_registrations, "carried_registrations", std::uint64_t, kGauge, "instances", \
      "restart_carried_registrations", "Engine-driven worker registrations carried over " \
      "from the predecessor.") \
  X(takeover_seconds, "takeover_seconds", double, kGauge, "seconds", \
      "restart_takeover_seconds", "From asking the predecessor to hand over to serving (its " \
      "drain included).") \
  X(recovered, "recovered", bool, kGauge, "bool", "restart_recovered", "1 when this server " \
      "adopted the pool a crashed predecessor left (--recover-pool).") \
  X(recovered_objects, "recovered_objects", std::uint64_t, kGauge, "objects", \
      "restart_recovered_objects", "Objects of the crashed predecessor served again: sealed " \
      "in its journal, their checksum verified.") \
  X(recovered_bytes, "recovered_bytes", std::uint64_t, kGauge, "bytes", \
      "restart_recovered_bytes", "Aligned bytes of the recovered objects (none was copied).") \
  X(recovery_held_slots, "recovery_held_slots", std::uint64_t, kGauge, "objects", \
      "restart_recovery_held_slots", "Slots of the crashed predecessor not served (staged, " \
      "not checksummed, or changed since): kept from reuse for a write TTL at most (a hold " \
      "an earlier recovery began keeps its end).") \
  X(recovery_held_bytes, "recovery_held_bytes", std::uint64_t, kGauge, "bytes", \
      "restart_recovery_held_bytes", "Bytes of the held slots.") \
  X(recovery_unsealed, "recovery_unsealed", std::uint64_t, kGauge, "objects", \
      "restart_recovery_unsealed", "Of the held slots: objects committed but not yet " \
      "checksummed when the predecessor died.") \
  X(recovery_checksum_mismatches, "recovery_checksum_mismatches", std::uint64_t, kGauge, \
      "objects", "restart_recovery_checksum_mismatches", "Of the held slots: objects whose " \
      "bytes no longer match their checksum.") \
  X(recovery_seconds, "recovery_seconds", double, kGauge, "seconds", \
      "restart_recovery_seconds", "Time to read the journal, verify every object and adopt " \
      "the pool.")

struct RestartStats {
  LMC_STATS_MEMBERS(LMC_RESTART_STATS)
};
std::span<const stats::Row<RestartStats>> RestartStatRows();

// StatsSnapshot's own figures, each declared once (stats/declare.h): the
// process's, the service's (counted by ServiceCounters), and the
// registrations ended by cause (kept as an array by worker::InstanceRules).
#define LMC_SERVICE_COUNTED_STATS(X, D)                                                           \
  X(lookups, "lookups", std::uint64_t, kCounter, "lookups", "lookups_total", "Lookups.", {},      \
    stats::kEverywhere, {}, stats::kReference)                                                    \
  X(lookup_requested_tokens, "requested_tokens", std::uint64_t, kCounter, "tokens",               \
    "lookup_requested_total", "Tokens looked up.", {}, stats::kEverywhere, {}, stats::kReference) \
  X(lookup_hit_tokens, "hit_tokens", std::uint64_t, kCounter, "tokens", "lookup_hit_total",       \
    "Tokens found cached by lookups (the L1 prefix).", {}, stats::kEverywhere, {},                \
    stats::kReference)                                                                            \
  X(lookups_skip_load, "skip_load_lookups", std::uint64_t, kCounter, "lookups",                   \
    "lookup_skip_load_total",                                                                     \
    "Lookups answered as a miss because the request set "                                         \
    "lmcache.skip_load (nothing locked or loaded).")                                              \
  X(lookups_engine_hinted, "engine_hinted_lookups", std::uint64_t, kCounter, "lookups",           \
    "lookup_engine_hinted_total",                                                                 \
    "Lookups that carried "                                                                       \
    "lmcache.hint.engine_computed_tokens.")                                                       \
  X(lookup_engine_held_tokens, "engine_held_tokens", std::uint64_t, kCounter, "tokens",           \
    "lookup_engine_held_total",                                                                   \
    "Tokens in whole chunks that lookups' engines already "                                       \
    "held (lmcache.hint.engine_computed_tokens): never locked or loaded for them.")               \
  X(lookup_decode_latency, "decode_latency", LatencyHistogram::Snapshot, kHistogram,              \
    "µs (seconds in Prometheus)", "lookup_stage_duration_seconds",                                \
    "Time of one stage of a lookup on the server, by stage: decoding its key, hashing its "       \
    "chunks, locking the resident prefix (the rest of its request time is the session, the "      \
    "prefetch's submission and the reply).",                                                      \
    {"stage", "decode"})                                                                          \
  X(lookup_hash_latency, "hash_latency", LatencyHistogram::Snapshot, kHistogram,                  \
    "µs (seconds in Prometheus)", "lookup_stage_duration_seconds", "", {"stage", "hash"})         \
  X(lookup_lock_latency, "lock_latency", LatencyHistogram::Snapshot, kHistogram,                  \
    "µs (seconds in Prometheus)", "lookup_stage_duration_seconds", "", {"stage", "lock"})         \
  X(block_allocation_reports, "block_allocation_reports", std::uint64_t, kCounter, "reports",     \
    "block_allocation_reports_total",                                                             \
    "report_block_allocation calls received (counted, "                                           \
    "not acted on).")                                                                             \
  X(refused_requests, "transport_errors", std::uint64_t, kCounter, "requests",                    \
    "transport_errors_total",                                                                     \
    "Requests answered before dispatch (bad frames, unknown "                                     \
    "operation).")

#define LMC_RELEASED_STATS(X, D) \
  D(released_instances[static_cast<std::size_t>(worker::ReleaseCause::kReaped)], "reaped", \
      kCounter, "instances", "instances_reaped_total", "Instances unregistered by the " \
      "reaper (the same as released, cause reaped).") \
  D(released_instances[static_cast<std::size_t>(worker::ReleaseCause::kReplaced)], \
      "replaced", kCounter, "instances", "instances_replaced_total", "Instances registered " \
      "again from another connection (the same as released, cause replaced).") \
  D(released_instances[static_cast<std::size_t>(worker::ReleaseCause::kDisconnected)], \
      "departed", kCounter, "instances", "instances_departed_total", "Instances whose " \
      "connection closed (the same as released, cause disconnected).") \
  D(released_instances[static_cast<std::size_t>(worker::ReleaseCause::kUnregistered)], \
      "unregistered", kCounter, "instances", "instances_released_total", \
      "Registrations ended, by cause (unregistered, disconnected, reaped, replaced; " \
      "docs/security.md).", {"cause", "unregistered"}) \
  D(released_instances[static_cast<std::size_t>(worker::ReleaseCause::kDisconnected)], \
      "disconnected", kCounter, "instances", "instances_released_total", "", \
      {"cause", "disconnected"}) \
  D(released_instances[static_cast<std::size_t>(worker::ReleaseCause::kReaped)], "reaped", \
      kCounter, "instances", "instances_released_total", "", {"cause", "reaped"}) \
  D(released_instances[static_cast<std::size_t>(worker::ReleaseCause::kReplaced)], \
      "replaced", kCounter, "instances", "instances_released_total", "", \
      {"cause", "replaced"})

#define LMC_SERVICE_STATS(X, D) \
  X(version, "version", std::string, kText, "", "build_info", \
      "The server's version (always 1).") \
  X(boot_id, "boot_id", std::string, kText, "", "boot_info", "The server process's boot id " \
      "(always 1); it changes at every start.") \
  X(uptime_seconds, "uptime_seconds", double, kGauge, "seconds", "uptime_seconds", \
      "Seconds since the server started.") \
  X(sessions, "sessions", std::uint64_t, kGauge, "sessions", "sessions", \
      "Request sessions held.") \
  X(session_bytes, "session_bytes", std::uint64_t, kGauge, "bytes", "session_bytes", \
      "Memory held by request sessions.") \
  X(sessions_dropped_for_memory, "sessions_dropped_for_memory", std::uint64_t, kCounter, \
      "sessions", "sessions_dropped_total", "Sessions dropped for memory.")

struct StatsSnapshot {
  LMC_STATS_MEMBERS(LMC_SERVICE_STATS)
  alloc::AllocatorStats allocator;
  store::TableStats table;
  store::JournalStats journal;  // zero without --recover-pool
  store::FlowStats flow;  // admitted, evicted, deleted
  store::EvictorStats evictor;
  store::QuotaStats quota;  // per-tenant L1 quotas
  transport::TransportStats transport;
  std::vector<OperationStats> operations;  // one per operation row, in table order
  ParkedStats parked;  // requests waiting without a thread
  worker::RegistryCounts instances;
  // Registrations ended, by cause (ReleaseCause: unregistered, disconnected,
  // reaped, replaced).
  std::array<std::uint64_t, worker::kReleaseCauses> released_instances{};
  worker::ChunkHasherStats hash_cache;
  LMC_STATS_MEMBERS(LMC_SERVICE_COUNTED_STATS)
  std::optional<tier::L2Stats> l2;  // absent without an L2 tier
  gpu::GpuStats gpu;                     // the CUDA-IPC path
  KvEventsStats kv_events;
  store::PrefaultProgress prefault;
  RestartStats restart;
  fleet::PeerTaskStats p2p_served;  // peers' lookups on this server's L1
  fleet::MembershipStats p2p_peers;   // the peers of --p2p-peers by state
  fleet::PeerRpcStats p2p_rpc;        // our calls to peers
  fleet::UcxChannelStats p2p_channel;  // the data channel
  fleet::P2pDirectoryStats p2p_directory;  // the directory, its feed, our chunk log
  fleet::P2pLookupStats p2p_lookups;       // what the p2p adapter's lookups asked and found
  fleet::EtcdStats p2p_etcd;               // membership through etcd
};
std::span<const stats::Row<StatsSnapshot>> ServiceStatRows();
std::span<const stats::Row<StatsSnapshot>> ServiceCountedStatRows();
std::span<const stats::Row<StatsSnapshot>> ReleasedStatRows();
// The service's own counters (ServiceState owns them; the lookup and admin
// operations bump them).
LMC_STATS_COUNTERS(ServiceCounters, StatsSnapshot, LMC_SERVICE_COUNTED_STATS);


// The `stats` reply: a msgpack map (docs/protocol.md lists its fields).
std::string EncodeStatsMsgpack(const StatsSnapshot& stats);

}  // namespace lmcache::server
