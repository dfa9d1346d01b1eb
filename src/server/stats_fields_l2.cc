// The stats schema's fields of the L2 tier: each adapter, the write-behind and the prefetch.
#include "server/stats_schema_tables.h"

namespace lmcache::server::stats_tables {
namespace {

constexpr const char* kInFlightHelp =
    "Objects (keys for lookups) in the adapter's calls now, by operation: its queue depth as the "
    "server sees it; load counts the prefetches loading from it.";
constexpr const char* kCallHelp =
    "Duration of one batched call to the adapter (Store, LookupAndLock, Load), by operation.";
const Entry<AdapterRow> kAdapterRows[] = {
    {{"type", K::kText, "", "l2_adapter_type_info", "The adapter's type (always 1)."},
     [](const AdapterRow& a) { return T(a.type); }},
    {{"description", K::kText, "", "l2_adapter_description_info",
      "What the adapter stores to, as configured (always 1)."},
     [](const AdapterRow& a) { return T(a.description); }},
    {{"io_engine", K::kText, "", "l2_io_engine_info",
      "How the adapter reads: io_uring, or sync (blocking reads on the prefetch threads, where "
      "io_uring is unavailable or not wanted); empty where the adapter has no choice (always 1)."},
     [](const AdapterRow& a) { return T(a.io_engine); }},
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

constexpr const char* kSkippedHelp = "New objects not written to L2, by reason.";
const Entry<L2> kL2StoreRows[] = {
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
const Entry<L2> kPrefetchRows[] = {
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

}  // namespace

const std::span<const Entry<AdapterRow>> kAdapter(kAdapterRows);
const std::span<const Entry<L2>> kL2Store(kL2StoreRows);
const std::span<const Entry<L2>> kPrefetch(kPrefetchRows);

}  // namespace lmcache::server::stats_tables
