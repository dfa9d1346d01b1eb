#include "server/stats_schema.h"

#include <span>
#include <string>

namespace lmcache::server {
namespace {

// One field and how to read it from the struct its group walks.
template <class T>
struct Entry {
  StatField field;
  StatValue (*get)(const T&);
};

StatValue U(std::uint64_t v) { return StatValue(std::in_place_type<std::uint64_t>, v); }
StatValue F(double v) { return StatValue(std::in_place_type<double>, v); }
StatValue B(bool v) { return StatValue(std::in_place_type<bool>, v); }
StatValue T(std::string_view v) { return StatValue(std::in_place_type<std::string_view>, v); }
StatValue H(const LatencyHistogram::Snapshot& h) { return StatValue(&h); }

double Ratio(std::uint64_t part, std::uint64_t whole) {
  return whole ? static_cast<double>(part) / static_cast<double>(whole) : 0;
}

using S = StatsSnapshot;
using K = StatKind;
constexpr StatReach kDerived = StatReach::kPrometheusOnly;
constexpr StatReach kElementLabel = StatReach::kElementLabel;
constexpr StatReach kBoth = StatReach::kEverywhere;

// The fields at the top of the reply, before the first group.
const Entry<S> kProcess[] = {
    {{"version", K::kText, "", "build_info", "The server's version (always 1)."},
     [](const S& s) { return T(s.version); }},
    {{"boot_id", K::kText, "", "boot_info",
      "The server process's boot id (always 1); it changes at every start."},
     [](const S& s) { return T(s.boot_id); }},
    {{"uptime_seconds", K::kGauge, "seconds", "uptime_seconds", "Seconds since the server started."},
     [](const S& s) { return F(s.uptime_seconds); }},
};

const Entry<S> kL1[] = {
    {{"capacity_bytes", K::kGauge, "bytes", "l1_capacity_bytes", "L1 pool size."},
     [](const S& s) { return U(s.allocator.capacity_bytes); }},
    {{"used_bytes", K::kGauge, "bytes", "l1_memory_usage_bytes",
      "L1 bytes held by objects (resident, staging, retired).", {}, kBoth, {}, true},
     [](const S& s) { return U(s.allocator.used_bytes); }},
    {{"usage_ratio", K::kGauge, "ratio", "l1_usage_ratio", "L1 bytes in use over the pool size.",
      {}, kDerived, {}, true},
     [](const S& s) { return F(Ratio(s.allocator.used_bytes, s.allocator.capacity_bytes)); }},
    {{"resident_bytes", K::kGauge, "bytes", "l1_resident_bytes", "L1 bytes of readable objects."},
     [](const S& s) { return U(s.table.resident_bytes); }},
    {{"staging_bytes", K::kGauge, "bytes", "l1_staging_bytes",
      "L1 bytes staged by writers, not yet committed.", {}, kBoth, {}, true},
     [](const S& s) { return U(s.table.staging_bytes); }},
    {{"locked_bytes", K::kGauge, "bytes", "l1_locked_bytes", "L1 bytes under a live read or write lease."},
     [](const S& s) { return U(s.table.locked_bytes); }},
    {{"retired_bytes", K::kGauge, "bytes", "l1_retired_bytes",
      "L1 bytes deleted while locked, freed when their lease ends."},
     [](const S& s) { return U(s.table.retired_bytes); }},
    {{"resident_objects", K::kGauge, "objects", "l1_resident_objects", "Objects readable in L1."},
     [](const S& s) { return U(s.table.resident_objects); }},
    {{"staging_objects", K::kGauge, "objects", "l1_staging_objects",
      "Objects staged by writers, not yet committed."},
     [](const S& s) { return U(s.table.staging_objects); }},
    {{"locked_objects", K::kGauge, "objects", "l1_locked_objects",
      "Objects under a live read or write lease."},
     [](const S& s) { return U(s.table.locked_objects); }},
    {{"retired_objects", K::kGauge, "objects", "l1_retired_objects",
      "Objects deleted while locked, freed when their lease ends."},
     [](const S& s) { return U(s.table.retired_objects); }},
    {{"quarantined_objects", K::kGauge, "objects", "l1_quarantined_objects",
      "Objects a worker staged and did not commit within its write lease, kept from reuse until "
      "the worker's registration ends."},
     [](const S& s) { return U(s.table.quarantined_objects); }},
    {{"quarantined_bytes", K::kGauge, "bytes", "l1_quarantined_bytes",
      "L1 bytes a worker staged and did not commit within --l1-write-ttl-seconds: kept from reuse "
      "(the worker might still write them) until its registration ends (unregister, disconnect, "
      "reaper); a value that grows names a stalled worker."},
     [](const S& s) { return U(s.table.quarantined_bytes); }},
    {{"read_locks", K::kGauge, "locks", "l1_read_locks",
      "Live read locks summed over resident objects."},
     [](const S& s) { return U(s.table.read_locks); }},
    {{"read_leases", K::kGauge, "leases", "l1_read_leases", "Live read leases."},
     [](const S& s) { return U(s.table.read_leases); }},
    {{"write_leases", K::kGauge, "leases", "l1_write_leases", "Live write leases."},
     [](const S& s) { return U(s.table.write_leases); }},
    {{"expired_writes_reclaimed", K::kCounter, "objects", "l1_expired_writes_reclaimed_total",
      "Staged objects freed (or quarantined) because their write lease expired."},
     [](const S& s) { return U(s.table.expired_writes_reclaimed); }},
    {{"admitted_objects", K::kCounter, "objects", "l1_write_total",
      "Objects admitted into L1, by where they came from (a client's store, or a load from L2).",
      {"source", "client"}, kBoth, {}, true},
     [](const S& s) { return U(s.flow.admitted_objects); }},
    {{"admitted_bytes", K::kCounter, "bytes", "l1_write_bytes_total",
      "Bytes admitted into L1, by where they came from.", {"source", "client"}},
     [](const S& s) { return U(s.flow.admitted_bytes); }},
    {{"tier_admitted_objects", K::kCounter, "objects", "l1_write_total", "", {"source", "l2"}},
     [](const S& s) { return U(s.flow.tier_admitted_objects); }},
    {{"tier_admitted_bytes", K::kCounter, "bytes", "l1_write_bytes_total", "", {"source", "l2"}},
     [](const S& s) { return U(s.flow.tier_admitted_bytes); }},
    {{"deleted_objects", K::kCounter, "objects", "l1_deleted_total",
      "Objects deleted from L1 (clear, delete)."},
     [](const S& s) { return U(s.flow.deleted_objects); }},
    {{"deleted_bytes", K::kCounter, "bytes", "l1_deleted_bytes_total",
      "Bytes deleted from L1 (clear, delete)."},
     [](const S& s) { return U(s.flow.deleted_bytes); }},
    {{"largest_allocatable_bytes", K::kGauge, "bytes", "l1_largest_allocatable_bytes",
      "The largest object one allocation is sure to get now (a free page run, or a free slot of "
      "an existing size class)."},
     [](const S& s) { return U(s.allocator.largest_allocatable_bytes); }},
    {{"largest_free_run_bytes", K::kGauge, "bytes", "l1_largest_free_run_bytes",
      "The longest run of free pages in no slab."},
     [](const S& s) { return U(s.allocator.largest_free_run_bytes); }},
    {{"pool_free_bytes", K::kGauge, "bytes", "l1_pool_free_bytes", "Usable pages in no slab."},
     [](const S& s) { return U(s.allocator.pool_free_bytes); }},
    {{"slab_slack_bytes", K::kGauge, "bytes", "l1_slab_slack_bytes",
      "Free slots and tails inside slabs."},
     [](const S& s) { return U(s.allocator.slab_slack_bytes); }},
    {{"fragmentation", K::kGauge, "ratio", "l1_fragmentation_ratio",
      "1 - largest free page run / free pages."},
     [](const S& s) { return F(s.allocator.fragmentation); }},
    {{"unready_bytes", K::kGauge, "bytes", "l1_unready_bytes",
      "Pool bytes not yet usable (pre-faulting at startup)."},
     [](const S& s) { return U(s.allocator.unready_bytes); }},
    {{"prefault_ready_bytes", K::kGauge, "bytes", "l1_prefault_ready_bytes",
      "Pool bytes pre-faulted and usable."},
     [](const S& s) { return U(s.prefault.ready_bytes); }},
    {{"prefault_ratio", K::kGauge, "ratio", "l1_prefault_ratio",
      "Fraction of the pool pre-faulted and usable (1 once startup pre-faulting is done).", {},
      kDerived},
     [](const S& s) { return F(Ratio(s.prefault.ready_bytes, s.prefault.total_bytes)); }},
    {{"prefault_done", K::kGauge, "bool", "l1_prefault_done", "1 once startup pre-faulting is done."},
     [](const S& s) { return B(s.prefault.done); }},
    {{"prefault_seconds", K::kGauge, "seconds", "l1_prefault_seconds",
      "Seconds pre-faulting took (so far, or in all once done)."},
     [](const S& s) { return F(s.prefault.seconds); }},
    {{"huge_page_bytes", K::kGauge, "bytes", "l1_huge_page_bytes",
      "Bytes of the pool the kernel maps with huge pages, measured once pre-faulting is done (0 "
      "with 4 KiB pages; see docs/deploy/README.md)."},
     [](const S& s) { return U(s.prefault.huge_page_bytes); }},
    {{"allocations", K::kCounter, "allocations", "l1_allocations_total", "Allocations made."},
     [](const S& s) { return U(s.allocator.allocations); }},
    {{"frees", K::kCounter, "allocations", "l1_frees_total", "Allocations freed."},
     [](const S& s) { return U(s.allocator.frees); }},
    {{"failed_allocations", K::kCounter, "allocations", "l1_allocation_failure_total",
      "Allocations that found no memory.", {}, kBoth, {}, true},
     [](const S& s) { return U(s.allocator.failed_allocations); }},
};

using ClassRow = alloc::ClassStats;
const Entry<ClassRow> kSizeClass[] = {
    {{"object_bytes", K::kGauge, "bytes", "", "The class's object size.", {}, kElementLabel},
     [](const ClassRow& c) { return U(c.object_bytes); }},
    {{"objects_per_slab", K::kGauge, "objects", "l1_size_class_objects_per_slab",
      "Objects one slab of the size class holds."},
     [](const ClassRow& c) { return U(c.objects_per_slab); }},
    {{"slabs", K::kGauge, "slabs", "l1_size_class_slabs", "Slabs the size class holds."},
     [](const ClassRow& c) { return U(c.slabs); }},
    {{"used_objects", K::kGauge, "objects", "l1_size_class_used_objects",
      "Live objects in the size class."},
     [](const ClassRow& c) { return U(c.used_objects); }},
    {{"free_objects", K::kGauge, "objects", "l1_size_class_free_objects",
      "Free slots inside the size class's slabs."},
     [](const ClassRow& c) { return U(c.free_objects); }},
};

const Entry<S> kEviction[] = {
    {{"passes", K::kCounter, "passes", "l1_eviction_loop_ticks_total", "Background eviction passes.",
      {}, kBoth, {}, true},
     [](const S& s) { return U(s.evictor.passes); }},
    {{"triggered_passes", K::kCounter, "passes", "l1_eviction_loop_triggered_total",
      "Passes that found usage over the trigger.", {}, kBoth, {}, true},
     [](const S& s) { return U(s.evictor.triggered_passes); }},
    {{"errors", K::kCounter, "passes", "l1_eviction_loop_errors_total",
      "Passes that failed (the loop goes on)."},
     [](const S& s) { return U(s.evictor.errors); }},
    {{"evicted_objects", K::kCounter, "objects", "l1_evicted_total",
      "Objects evicted from L1 (background and on demand).", {}, kBoth, {}, true},
     [](const S& s) { return U(s.flow.evicted_objects); }},
    {{"evicted_bytes", K::kCounter, "bytes", "l1_evicted_bytes_total", "Bytes evicted from L1."},
     [](const S& s) { return U(s.flow.evicted_bytes); }},
    {{"background_evicted_objects", K::kCounter, "objects", "l1_background_evicted_total",
      "Objects the background passes evicted."},
     [](const S& s) { return U(s.evictor.evicted_objects); }},
    {{"background_evicted_bytes", K::kCounter, "bytes", "l1_background_evicted_bytes_total",
      "Bytes the background passes evicted."},
     [](const S& s) { return U(s.evictor.evicted_bytes); }},
    {{"nudged_passes", K::kCounter, "passes", "l1_eviction_loop_nudged_total",
      "Passes started early by an admission over the trigger."},
     [](const S& s) { return U(s.evictor.nudges); }},
    {{"reclaimed_objects", K::kCounter, "objects", "l1_reclaimed_total",
      "Objects the passes freed from expired write leases and ended retirements."},
     [](const S& s) { return U(s.evictor.reclaimed_objects); }},
    {{"on_demand_evictions", K::kCounter, "reservations", "l1_on_demand_evictions_total",
      "Stores that had to evict to make room."},
     [](const S& s) { return U(s.table.on_demand_evictions); }},
    {{"last_success_unix_seconds", K::kGauge, "seconds", "l1_eviction_last_success_timestamp_seconds",
      "Unix time of the last completed eviction pass (0: none yet)."},
     [](const S& s) { return F(s.evictor.last_success_wall_seconds); }},
};

using OperationRow = OperationStats;
const Entry<OperationRow> kOperation[] = {
    {{"requests", K::kCounter, "requests", "requests_total",
      "Requests run, by operation (operations called at least once)."},
     [](const OperationRow& o) { return U(o.requests); }},
    {{"errors", K::kCounter, "requests", "request_errors_total", "Requests that failed, by operation."},
     [](const OperationRow& o) { return U(o.errors); }},
    {{"latency", K::kHistogram, "µs (seconds in Prometheus)", "request_duration_seconds",
      "Time to run a request, by operation (buckets 50 us to 10 s).", {}, kBoth,
      HistogramForm::kFlat},
     [](const OperationRow& o) { return H(o.latency); }},
};

const Entry<S> kTransportErrors[] = {
    {{"transport_errors", K::kCounter, "requests", "transport_errors_total",
      "Requests answered before dispatch (bad frames, unknown operation)."},
     [](const S& s) { return U(s.refused_requests); }},
};

const Entry<S> kRouter[] = {
    {{"received", K::kCounter, "requests", "requests_received_total",
      "Requests the transport received."},
     [](const S& s) { return U(s.transport.received); }},
    {{"replied", K::kCounter, "replies", "replies_total", "Replies the transport sent."},
     [](const S& s) { return U(s.transport.replied); }},
    {{"undeliverable", K::kCounter, "replies", "replies_undeliverable_total",
      "Replies whose client had gone."},
     [](const S& s) { return U(s.transport.undeliverable); }},
    {{"refused", K::kCounter, "requests", "requests_refused_total",
      "Requests answered with an error before running (bad frames, unknown operation, overload)."},
     [](const S& s) { return U(s.transport.refused); }},
    {{"overloaded", K::kCounter, "requests", "requests_overloaded_total",
      "Requests refused because a queue was full (402)."},
     [](const S& s) { return U(s.transport.overloaded); }},
    {{"queued_requests", K::kGauge, "requests", "router_queued_requests",
      "Requests waiting in the worker pools."},
     [](const S& s) { return U(s.transport.queued_requests); }},
    {{"queued_bytes", K::kGauge, "bytes", "router_queued_bytes",
      "Bytes of requests waiting in the worker pools."},
     [](const S& s) { return U(s.transport.queued_bytes); }},
    {{"connections", K::kGauge, "connections", "connections", "Client connections open."},
     [](const S& s) { return U(s.transport.connections); }},
    {{"disconnects", K::kCounter, "connections", "disconnects_total",
      "Client connections that closed."},
     [](const S& s) { return U(s.transport.disconnects); }},
};

std::uint64_t Released(const S& s, ReleaseCause cause) {
  return s.released_instances[static_cast<std::size_t>(cause)];
}

const Entry<S> kInstances[] = {
    {{"registered", K::kGauge, "instances", "instances", "Registered worker instances."},
     [](const S& s) { return U(s.instances.instances); }},
    {{"pending_writes", K::kGauge, "calls", "pending_writes",
      "prepare_store calls waiting for their commit."},
     [](const S& s) { return U(s.instances.pending_writes); }},
    {{"pending_reads", K::kGauge, "calls", "pending_reads",
      "prepare_retrieve calls waiting for their commit."},
     [](const S& s) { return U(s.instances.pending_reads); }},
    // The first names, kept for existing dashboards (the same as `released`).
    {{"reaped", K::kCounter, "instances", "instances_reaped_total",
      "Instances unregistered by the reaper (the same as released, cause reaped)."},
     [](const S& s) { return U(Released(s, ReleaseCause::kReaped)); }},
    {{"replaced", K::kCounter, "instances", "instances_replaced_total",
      "Instances registered again from another connection (the same as released, cause "
      "replaced)."},
     [](const S& s) { return U(Released(s, ReleaseCause::kReplaced)); }},
    {{"departed", K::kCounter, "instances", "instances_departed_total",
      "Instances whose connection closed (the same as released, cause disconnected)."},
     [](const S& s) { return U(Released(s, ReleaseCause::kDisconnected)); }},
};

constexpr const char* kReleasedHelp =
    "Registrations ended, by cause (unregistered, disconnected, reaped, replaced; "
    "docs/security.md).";
const Entry<S> kReleased[] = {
    {{"unregistered", K::kCounter, "instances", "instances_released_total", kReleasedHelp,
      {"cause", "unregistered"}},
     [](const S& s) { return U(Released(s, ReleaseCause::kUnregistered)); }},
    {{"disconnected", K::kCounter, "instances", "instances_released_total", "",
      {"cause", "disconnected"}},
     [](const S& s) { return U(Released(s, ReleaseCause::kDisconnected)); }},
    {{"reaped", K::kCounter, "instances", "instances_released_total", "", {"cause", "reaped"}},
     [](const S& s) { return U(Released(s, ReleaseCause::kReaped)); }},
    {{"replaced", K::kCounter, "instances", "instances_released_total", "", {"cause", "replaced"}},
     [](const S& s) { return U(Released(s, ReleaseCause::kReplaced)); }},
};

const Entry<S> kSessions[] = {
    {{"sessions", K::kGauge, "sessions", "sessions", "Request sessions held."},
     [](const S& s) { return U(s.sessions); }},
    {{"session_bytes", K::kGauge, "bytes", "session_bytes", "Memory held by request sessions."},
     [](const S& s) { return U(s.session_bytes); }},
    {{"sessions_dropped_for_memory", K::kCounter, "sessions", "sessions_dropped_total",
      "Sessions dropped for memory."},
     [](const S& s) { return U(s.sessions_dropped_for_memory); }},
};

const Entry<S> kParked[] = {
    {{"requests", K::kGauge, "requests", "parked_requests",
      "Requests waiting without a thread now (deferred replies: a wait_prefetch_status on a "
      "prefetch still loading)."},
     [](const S& s) { return U(s.parked.requests); }},
};

using ParkedRow = ParkedOpStats;
constexpr const char* kParkEndHelp =
    "ParkedRow requests answered, by operation and why (woken: what they waited for came; "
    "deadline: their timeout passed, a deadline miss; closed: their client went; drained: the "
    "server stopped).";
const Entry<ParkedRow> kParkedOperation[] = {
    {{"parked", K::kCounter, "requests", "parked_total", "Requests parked to answer later, by operation."},
     [](const ParkedRow& p) { return U(p.parked); }},
    {{"refused", K::kCounter, "requests", "parked_refused_total",
      "Requests answered 402 at once because their client had 64 requests parked (or the server "
      "65,536), by operation."},
     [](const ParkedRow& p) { return U(p.refused); }},
    {{"woken", K::kCounter, "requests", "parked_ended_total", kParkEndHelp, {"end", "woken"}},
     [](const ParkedRow& p) { return U(p.ended[static_cast<std::size_t>(ParkEnd::kWoken)]); }},
    {{"deadline", K::kCounter, "requests", "parked_ended_total", "", {"end", "deadline"}},
     [](const ParkedRow& p) { return U(p.ended[static_cast<std::size_t>(ParkEnd::kDeadline)]); }},
    {{"closed", K::kCounter, "requests", "parked_ended_total", "", {"end", "closed"}},
     [](const ParkedRow& p) { return U(p.ended[static_cast<std::size_t>(ParkEnd::kClosed)]); }},
    {{"drained", K::kCounter, "requests", "parked_ended_total", "", {"end", "drained"}},
     [](const ParkedRow& p) { return U(p.ended[static_cast<std::size_t>(ParkEnd::kDrained)]); }},
};

using AdapterRow = tier::L2AdapterStats;
constexpr const char* kInFlightHelp =
    "Objects (keys for lookups) in the adapter's calls now, by operation: its queue depth as the "
    "server sees it; load counts the prefetches loading from it.";
constexpr const char* kCallHelp =
    "Duration of one batched call to the adapter (Store, LookupAndPin, Load), by operation.";
const Entry<AdapterRow> kAdapter[] = {
    {{"type", K::kText, "", "l2_adapter_type_info", "The adapter's type (always 1)."},
     [](const AdapterRow& a) { return T(a.type); }},
    {{"description", K::kText, "", "l2_adapter_description_info",
      "What the adapter stores to, as configured (always 1)."},
     [](const AdapterRow& a) { return T(a.description); }},
    {{"stored_objects", K::kCounter, "objects", "l2_store_completed_objects_total",
      "Objects written to the adapter.", {}, kBoth, {}, true},
     [](const AdapterRow& a) { return U(a.stored_objects); }},
    {{"stored_bytes", K::kCounter, "bytes", "l2_store_completed_bytes_total",
      "Bytes written to the adapter."},
     [](const AdapterRow& a) { return U(a.stored_bytes); }},
    {{"store_failures", K::kCounter, "objects", "l2_store_failures_total", "Writes the adapter failed."},
     [](const AdapterRow& a) { return U(a.store_failures); }},
    {{"loaded_objects", K::kCounter, "objects", "l2_load_completed_objects_total",
      "Objects loaded from the adapter."},
     [](const AdapterRow& a) { return U(a.loaded_objects); }},
    {{"loaded_bytes", K::kCounter, "bytes", "l2_load_completed_bytes_total",
      "Bytes loaded from the adapter."},
     [](const AdapterRow& a) { return U(a.loaded_bytes); }},
    {{"load_misses", K::kCounter, "objects", "l2_load_misses_total",
      "Loads of objects the adapter no longer held."},
     [](const AdapterRow& a) { return U(a.load_misses); }},
    {{"load_failures", K::kCounter, "objects", "l2_load_failures_total",
      "Loads the adapter failed (I/O error, timeout)."},
     [](const AdapterRow& a) { return U(a.load_failures); }},
    {{"checksum_failures", K::kCounter, "objects", "l2_checksum_failures_total",
      "Objects that failed their check and were deleted."},
     [](const AdapterRow& a) { return U(a.checksum_failures); }},
    {{"evicted_objects", K::kCounter, "objects", "l2_evicted_objects_total",
      "Objects the adapter evicted for capacity.", {}, kBoth, {}, true},
     [](const AdapterRow& a) { return U(a.evicted_objects); }},
    {{"evicted_bytes", K::kCounter, "bytes", "l2_evicted_bytes_total",
      "Bytes the adapter evicted for capacity."},
     [](const AdapterRow& a) { return U(a.evicted_bytes); }},
    {{"objects", K::kGauge, "objects", "l2_objects", "Objects the adapter holds."},
     [](const AdapterRow& a) { return U(a.objects); }},
    {{"usage_bytes", K::kGauge, "bytes", "l2_usage_bytes", "Bytes the adapter holds.", {}, kBoth, {},
      true},
     [](const AdapterRow& a) { return U(a.usage_bytes); }},
    {{"capacity_bytes", K::kGauge, "bytes", "l2_capacity_bytes", "The adapter's capacity (0 = unbounded)."},
     [](const AdapterRow& a) { return U(a.capacity_bytes); }},
    {{"condition", K::kText, "", "l2_condition_info",
      "What is wrong with the adapter now (empty when healthy; always 1)."},
     [](const AdapterRow& a) { return T(a.condition); }},
    {{"healthy", K::kGauge, "bool", "l2_healthy",
      "0 while the adapter is in a failing condition (disk full, directory gone, node down).", {},
      kDerived},
     [](const AdapterRow& a) { return B(a.condition.empty()); }},
    {{"rebuild_seconds", K::kGauge, "seconds", "l2_rebuild_seconds",
      "Seconds the adapter's index rebuild at startup took (fs)."},
     [](const AdapterRow& a) { return F(a.rebuild_seconds); }},
    {{"rebuilt_objects", K::kGauge, "objects", "l2_rebuilt_objects",
      "Objects the index rebuild at startup found (fs)."},
     [](const AdapterRow& a) { return U(a.rebuilt_objects); }},
    {{"storing_objects", K::kGauge, "objects", "l2_in_flight_objects", kInFlightHelp,
      {"operation", "store"}},
     [](const AdapterRow& a) { return U(a.storing_objects); }},
    {{"loading_objects", K::kGauge, "objects", "l2_in_flight_objects", "", {"operation", "load"}},
     [](const AdapterRow& a) { return U(a.loading_objects); }},
    {{"looking_up_keys", K::kGauge, "keys", "l2_in_flight_objects", "", {"operation", "lookup"}},
     [](const AdapterRow& a) { return U(a.looking_up_keys); }},
    {{"store_latency", K::kHistogram, "µs (seconds in Prometheus)", "l2_call_duration_seconds",
      kCallHelp, {"operation", "store"}},
     [](const AdapterRow& a) { return H(a.store_latency); }},
    {{"lookup_latency", K::kHistogram, "µs (seconds in Prometheus)", "l2_call_duration_seconds", "",
      {"operation", "lookup"}},
     [](const AdapterRow& a) { return H(a.lookup_latency); }},
    {{"load_latency", K::kHistogram, "µs (seconds in Prometheus)", "l2_call_duration_seconds", "",
      {"operation", "load"}},
     [](const AdapterRow& a) { return H(a.load_latency); }},
};

using L2 = tier::L2Stats;
constexpr const char* kSkippedHelp = "New objects not written to L2, by reason.";
const Entry<L2> kL2Store[] = {
    {{"queued_objects", K::kGauge, "objects", "l2_store_queue_objects",
      "New objects waiting to be written to L2."},
     [](const L2& l) { return U(l.store.queued_objects); }},
    {{"queued_bytes", K::kGauge, "bytes", "l2_store_queue_bytes",
      "Bytes of new objects waiting to be written to L2."},
     [](const L2& l) { return U(l.store.queued_bytes); }},
    {{"in_flight", K::kGauge, "objects", "l2_store_in_flight_objects",
      "Objects in a batch being written now."},
     [](const L2& l) { return U(l.store.in_flight); }},
    {{"stored", K::kCounter, "objects", "l2_store_submitted_objects_total",
      "Objects written to every L2 adapter."},
     [](const L2& l) { return U(l.store.stored); }},
    {{"failed", K::kCounter, "objects", "l2_store_skipped_total", kSkippedHelp, {"reason", "failed"}},
     [](const L2& l) { return U(l.store.failed); }},
    {{"skipped_queue_full", K::kCounter, "objects", "l2_store_skipped_total", "",
      {"reason", "queue_full"}},
     [](const L2& l) { return U(l.store.skipped_queue_full); }},
    {{"skipped_gone", K::kCounter, "objects", "l2_store_skipped_total", "", {"reason", "gone"}},
     [](const L2& l) { return U(l.store.skipped_gone); }},
    {{"dropped_at_stop", K::kCounter, "objects", "l2_store_dropped_at_stop_total",
      "Objects still queued for L2 when the server stopped."},
     [](const L2& l) { return U(l.store.dropped_at_stop); }},
    {{"deleted_from_l1", K::kCounter, "objects", "l2_store_deleted_from_l1_total",
      "Objects deleted from L1 once written to L2 (skip_l1 stores)."},
     [](const L2& l) { return U(l.store.deleted_from_l1); }},
};

constexpr const char* kFailedChunksHelp = "Planned chunks not loaded, by reason.";
constexpr const char* kDeadlineHelp =
    "Prefetch deadline misses (--l2-prefetch-load-timeout), by outcome: prefix (the load stopped "
    "at a batch boundary and served what it had), abandoned (still inside an adapter call at "
    "twice the deadline: answered with the L1 hits only).";
const Entry<L2> kPrefetch[] = {
    {{"submitted", K::kCounter, "lookups", "l2_prefetch_lookup_total",
      "Lookups handed to the prefetch controller.", {}, kBoth, {}, true},
     [](const L2& l) { return U(l.prefetch.submitted); }},
    {{"queued", K::kGauge, "lookups", "l2_prefetch_queued", "Prefetches waiting for a worker."},
     [](const L2& l) { return U(l.prefetch.queued); }},
    {{"in_flight", K::kGauge, "lookups", "l2_prefetch_in_flight", "Prefetches running now."},
     [](const L2& l) { return U(l.prefetch.in_flight); }},
    {{"active_jobs", K::kGauge, "lookups", "active_prefetch_jobs",
      "Lookups loading from L2 or waiting to (in_flight + queued).", {}, kDerived, {}, true},
     [](const L2& l) { return U(l.prefetch.in_flight + l.prefetch.queued); }},
    {{"completed", K::kCounter, "lookups", "l2_prefetch_completed_total", "Prefetches finished."},
     [](const L2& l) { return U(l.prefetch.completed); }},
    {{"cancelled", K::kCounter, "lookups", "l2_prefetch_cancelled_total",
      "Prefetches cancelled before they finished."},
     [](const L2& l) { return U(l.prefetch.cancelled); }},
    {{"refused", K::kCounter, "lookups", "l2_prefetch_refused_total",
      "Prefetches answered at once with their L1 hits because the queue for a prefetch worker "
      "was full (65,536 requests or 1 GiB of their keys)."},
     [](const L2& l) { return U(l.prefetch.refused); }},
    {{"l2_hit_chunks", K::kCounter, "chunks", "lookup_hit_l2_chunks_total",
      "Chunks the L2 lookups found after the L1 prefix (the reference's lookup_hit_l2 counts "
      "tokens)."},
     [](const L2& l) { return U(l.prefetch.l2_hit_chunks); }},
    {{"loaded_chunks", K::kCounter, "chunks", "l2_prefetch_loaded_chunks_total",
      "Chunks loaded from L2 into L1."},
     [](const L2& l) { return U(l.prefetch.loaded_chunks); }},
    {{"load_failed_chunks", K::kCounter, "chunks", "l2_prefetch_failed_chunks_total",
      kFailedChunksHelp, {"reason", "load_failed"}},
     [](const L2& l) { return U(l.prefetch.load_failed_chunks); }},
    {{"no_memory_chunks", K::kCounter, "chunks", "l2_prefetch_failed_chunks_total", "",
      {"reason", "l1_oom"}},
     [](const L2& l) { return U(l.prefetch.no_memory_chunks); }},
    {{"deadline_expired", K::kCounter, "lookups", "l2_prefetch_deadline_total", kDeadlineHelp,
      {"outcome", "prefix"}},
     [](const L2& l) { return U(l.prefetch.deadline_expired); }},
    {{"abandoned_loads", K::kCounter, "lookups", "l2_prefetch_deadline_total", "",
      {"outcome", "abandoned"}},
     [](const L2& l) { return U(l.prefetch.abandoned_loads); }},
    {{"abandoned_in_flight", K::kGauge, "lookups", "l2_prefetch_abandoned_in_flight",
      "Abandoned prefetches whose adapter call has not returned: their L1 buffers stay reserved "
      "until it does (a hung backend shows here)."},
     [](const L2& l) { return U(l.prefetch.abandoned_in_flight); }},
    {{"latency", K::kHistogram, "µs (seconds in Prometheus)", "l2_prefetch_duration_seconds",
      "Time from a lookup's prefetch to its result."},
     [](const L2& l) { return H(l.prefetch.latency); }},
};

const Entry<S> kLookup[] = {
    {{"lookups", K::kCounter, "lookups", "lookups_total", "Lookups.", {}, kBoth, {}, true},
     [](const S& s) { return U(s.lookups); }},
    {{"requested_tokens", K::kCounter, "tokens", "lookup_requested_total", "Tokens looked up.", {},
      kBoth, {}, true},
     [](const S& s) { return U(s.lookup_requested_tokens); }},
    {{"hit_tokens", K::kCounter, "tokens", "lookup_hit_total",
      "Tokens found cached by lookups (the L1 prefix).", {}, kBoth, {}, true},
     [](const S& s) { return U(s.lookup_hit_tokens); }},
    {{"hash_cache_hits", K::kCounter, "hashes", "hash_cache_hits_total",
      "Chunk hashes answered by the hash cache."},
     [](const S& s) { return U(s.hash_cache.hits); }},
    {{"hash_cache_misses", K::kCounter, "hashes", "hash_cache_misses_total", "Chunk hashes computed."},
     [](const S& s) { return U(s.hash_cache.misses); }},
    {{"hash_cache_entries", K::kGauge, "entries", "hash_cache_entries",
      "Token prefixes the hash cache holds."},
     [](const S& s) { return U(s.hash_cache.entries); }},
    {{"hash_cache_bytes", K::kGauge, "bytes", "hash_cache_bytes", "Memory the hash cache holds."},
     [](const S& s) { return U(s.hash_cache.bytes); }},
};

const Entry<S> kBlockReports[] = {
    {{"block_allocation_reports", K::kCounter, "reports", "block_allocation_reports_total",
      "report_block_allocation calls received (counted, not acted on)."},
     [](const S& s) { return U(s.block_allocation_reports); }},
};

const Entry<S> kGpu[] = {
    {{"contexts", K::kGauge, "contexts", "gpu_contexts",
      "GPU registrations with a device context (CUDA-IPC path)."},
     [](const S& s) { return U(s.gpu.contexts); }},
    {{"closing_contexts", K::kGauge, "contexts", "gpu_closing_contexts",
      "Device contexts of departed workers waiting for their copies to drain; stuck above 0 "
      "means an engine event that never completes."},
     [](const S& s) { return U(s.gpu.closing); }},
    {{"transfers_in_flight", K::kGauge, "transfers", "gpu_transfers_in_flight",
      "GPU stores and retrieves queued or copying."},
     [](const S& s) { return U(s.gpu.transfers_in_flight); }},
    {{"mapped_allocations", K::kGauge, "allocations", "gpu_mapped_allocations",
      "Workers' GPU allocations mapped through IPC handles; should fall back after workers leave "
      "(#4980)."},
     [](const S& s) { return U(s.gpu.mapped_allocations); }},
    {{"mapped_bytes", K::kGauge, "bytes", "gpu_mapped_bytes",
      "Bytes of the workers' GPU allocations mapped through IPC handles (their real extent); "
      "should fall back with them."},
     [](const S& s) { return U(s.gpu.mapped_bytes); }},
};

constexpr StatGroup kL1Group{"l1", GroupForm::kMap, "", "L1 pool"};
constexpr StatGroup kSizeClassGroup{"size_classes", GroupForm::kArray, "object_bytes",
                                    "L1 size classes (one per object size)"};
constexpr StatGroup kEvictionGroup{"eviction", GroupForm::kMap, "", "L1 eviction"};
constexpr StatGroup kOperationsGroup{"operations", GroupForm::kKeyedMap, "operation",
                                     "Requests, by operation (those called at least once)"};
constexpr StatGroup kRouterGroup{"router", GroupForm::kMap, "", "Transport"};
constexpr StatGroup kInstancesGroup{"instances", GroupForm::kMap, "", "Worker instances"};
constexpr StatGroup kReleasedGroup{"released", GroupForm::kMap, "", "Registrations ended"};
constexpr StatGroup kParkedGroup{"parked", GroupForm::kMap, "", "ParkedRow requests (deferred replies)"};
constexpr StatGroup kParkedOpsGroup{"operations", GroupForm::kKeyedMap, "operation",
                                    "ParkedRow requests, by operation"};
constexpr StatGroup kL2Group{"l2", GroupForm::kMap, "", "L2 (only with --l2-adapter)", true};
constexpr StatGroup kAdaptersGroup{"adapters", GroupForm::kArray, "l2_name",
                                   "L2 adapters (l2_name: <type>#<position>, e.g. fs#1)"};
constexpr StatGroup kL2StoreGroup{"store", GroupForm::kMap, "", "L2 write-behind"};
constexpr StatGroup kPrefetchGroup{"prefetch", GroupForm::kMap, "", "L2 prefetch"};
constexpr StatGroup kLookupGroup{"lookup", GroupForm::kMap, "", "Lookups"};
constexpr StatGroup kGpuGroup{"gpu", GroupForm::kMap, "", "GPU (CUDA-IPC path)"};

template <class E>
void Fields(std::span<const Entry<E>> table, const E* element, StatsVisitor& v) {
  for (const Entry<E>& entry : table) {
    if (element == nullptr) {
      v.Field(entry.field, nullptr);
      continue;
    }
    const StatValue value = entry.get(*element);
    v.Field(entry.field, &value);
  }
}

template <class E, std::size_t N>
void Fields(const Entry<E> (&table)[N], const E* element, StatsVisitor& v) {
  Fields(std::span<const Entry<E>>(table), element, v);
}

template <class E, std::size_t N>
void Map(const StatGroup& group, const Entry<E> (&table)[N], const E* element, StatsVisitor& v) {
  v.BeginGroup(group);
  Fields(table, element, v);
  v.EndGroup();
}

// A repeated group: each element under its label value, or (schema walk) the fields once.
template <class E, std::size_t N, class Elements, class LabelOf>
void Repeated(const StatGroup& group, const Entry<E> (&table)[N], const Elements* elements,
              LabelOf label_of, StatsVisitor& v) {
  v.BeginGroup(group);
  if (elements == nullptr) {
    std::string placeholder = "<";
    placeholder.append(group.label).append(">");
    v.BeginElement(placeholder);
    Fields<E>(table, nullptr, v);
    v.EndElement();
  } else {
    std::size_t position = 0;
    for (const auto& item : *elements) {
      const auto [label, element] = label_of(item, position++);
      if (element == nullptr) continue;
      v.BeginElement(label);
      Fields<E>(table, element, v);
      v.EndElement();
    }
  }
  v.EndGroup();
}

void VisitL2(const S* s, StatsVisitor& v) {
  if (s != nullptr && !s->l2) {
    v.AbsentGroup(kL2Group);
    return;
  }
  const L2* l2 = s ? &*s->l2 : nullptr;
  v.BeginGroup(kL2Group);
  Repeated(kAdaptersGroup, kAdapter, l2 ? &l2->adapters : nullptr,
           [](const AdapterRow& a, std::size_t i) {
             return std::pair(a.type + "#" + std::to_string(i + 1), &a);
           },
           v);
  Map(kL2StoreGroup, kL2Store, l2, v);
  Map(kPrefetchGroup, kPrefetch, l2, v);
  v.EndGroup();
}

}  // namespace

std::string_view StatKindName(StatKind kind) {
  switch (kind) {
    case StatKind::kCounter: return "counter";
    case StatKind::kGauge: return "gauge";
    case StatKind::kHistogram: return "histogram";
    case StatKind::kText: return "info";
  }
  return "?";
}

void VisitStats(const StatsSnapshot* s, StatsVisitor& v) {
  Fields(kProcess, s, v);
  v.BeginGroup(kL1Group);
  Fields(kL1, s, v);
  Repeated(kSizeClassGroup, kSizeClass, s ? &s->allocator.classes : nullptr,
           [](const ClassRow& c, std::size_t) { return std::pair(std::to_string(c.object_bytes), &c); },
           v);
  v.EndGroup();
  Map(kEvictionGroup, kEviction, s, v);
  Repeated(kOperationsGroup, kOperation, s ? &s->operations : nullptr,
           [](const OperationRow& o, std::size_t) {
             return std::pair(std::string_view(o.name), o.requests ? &o : nullptr);
           },
           v);
  Fields(kTransportErrors, s, v);
  Map(kRouterGroup, kRouter, s, v);
  v.BeginGroup(kInstancesGroup);
  Fields(kInstances, s, v);
  Map(kReleasedGroup, kReleased, s, v);
  v.EndGroup();
  Fields(kSessions, s, v);
  v.BeginGroup(kParkedGroup);
  Fields(kParked, s, v);
  Repeated(kParkedOpsGroup, kParkedOperation, s ? &s->parked.by_operation : nullptr,
           [](const auto& item, std::size_t) {
             return std::pair(std::string_view(item.first), &item.second);
           },
           v);
  v.EndGroup();
  VisitL2(s, v);
  Map(kLookupGroup, kLookup, s, v);
  Fields(kBlockReports, s, v);
  Map(kGpuGroup, kGpu, s, v);
}

}  // namespace lmcache::server
