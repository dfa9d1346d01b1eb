// The L2 tier's figures, each declared once (stats/declare.h): each
// adapter's (its counters kept by L2Counters, its levels measured by the
// adapter and the MeteredAdapter around it), the write-behind's
// (StoreControllerCounters) and the prefetch's (PrefetchControllerCounters).
//
// Thread-safety: plain values; the generated counter sets are relaxed
// atomics.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/histogram.h"
#include "stats/declare.h"

namespace lmcache::tier {

// L2AdapterStats's figures, each declared once (stats/declare.h): the
// adapter's own, then the meter's.
#define LMC_L2_ADAPTER_OWN_STATS(X, D) \
  X(name, "name", std::string, kText, "", "l2_adapter_name_info", \
      "The adapter's name in the cascade: its \"name\", or <type>#<n> (always 1).") \
  X(type, "type", std::string, kText, "", "l2_adapter_type_info", \
      "The adapter's type (always 1).") \
  X(description, "description", std::string, kText, "", "l2_adapter_description_info", \
      "What the adapter stores to, as configured (always 1).") \
  X(io_engine, "io_engine", std::string, kText, "", "l2_io_engine_info", \
      "How the adapter reads: io_uring, or sync (blocking reads on the prefetch threads, " \
      "where io_uring is unavailable or not wanted); empty where the adapter has no choice " \
      "(always 1).") \
  X(stored_objects, "stored_objects", std::uint64_t, kCounter, "objects", \
      "l2_store_completed_objects_total", "Objects written to the adapter.", {}, \
      stats::kEverywhere, {}, stats::kReference) \
  X(stored_bytes, "stored_bytes", std::uint64_t, kCounter, "bytes", \
      "l2_store_completed_bytes_total", "Bytes written to the adapter.") \
  X(store_failures, "store_failures", std::uint64_t, kCounter, "objects", \
      "l2_store_failures_total", "Writes the adapter failed.") \
  X(loaded_objects, "loaded_objects", std::uint64_t, kCounter, "objects", \
      "l2_load_completed_objects_total", "Objects loaded from the adapter.") \
  X(loaded_bytes, "loaded_bytes", std::uint64_t, kCounter, "bytes", \
      "l2_load_completed_bytes_total", "Bytes loaded from the adapter.") \
  X(load_misses, "load_misses", std::uint64_t, kCounter, "objects", "l2_load_misses_total", \
      "Loads of objects the adapter no longer held.") \
  X(load_failures, "load_failures", std::uint64_t, kCounter, "objects", \
      "l2_load_failures_total", "Loads the adapter failed (I/O error, timeout).") \
  X(checksum_failures, "checksum_failures", std::uint64_t, kCounter, "objects", \
      "l2_checksum_failures_total", "Objects that failed their check and were deleted.") \
  X(evicted_objects, "evicted_objects", std::uint64_t, kCounter, "objects", \
      "l2_evicted_objects_total", "Objects the adapter evicted for capacity.", {}, \
      stats::kEverywhere, {}, stats::kReference) \
  X(evicted_bytes, "evicted_bytes", std::uint64_t, kCounter, "bytes", \
      "l2_evicted_bytes_total", "Bytes the adapter evicted for capacity.") \
  X(over_quota_stores, "over_quota_stores", std::uint64_t, kCounter, "objects", \
      "l2_over_quota_stores_total", "Writes refused because the object's tenant was at its " \
      "quota here with nothing of its own left to evict (fs, mock).") \
  X(objects, "objects", std::uint64_t, kGauge, "objects", "l2_objects", \
      "Objects the adapter holds.") \
  X(usage_bytes, "usage_bytes", std::uint64_t, kGauge, "bytes", "l2_usage_bytes", \
      "Bytes the adapter holds.", {}, stats::kEverywhere, {}, stats::kReference) \
  X(capacity_bytes, "capacity_bytes", std::uint64_t, kGauge, "bytes", "l2_capacity_bytes", \
      "The adapter's capacity (0 = unbounded).") \
  X(condition, "condition", std::string, kText, "", "l2_condition_info", \
      "What is wrong with the adapter now (empty when healthy; always 1).") \
  D(Healthy(), "healthy", kGauge, "bool", "l2_healthy", "0 while the adapter is in a " \
      "failing condition (disk full, directory gone, node down).", {}, stats::kPrometheusOnly) \
  X(rebuild_seconds, "rebuild_seconds", double, kGauge, "seconds", "l2_rebuild_seconds", \
      "Seconds the adapter's index rebuild at startup took (fs).") \
  X(rebuilt_objects, "rebuilt_objects", std::uint64_t, kGauge, "objects", \
      "l2_rebuilt_objects", "Objects the index rebuild at startup found (fs).")

// What MeteredAdapter measures of every adapter, the last of its figures.
#define LMC_L2_METERED_STATS(X, D) \
  X(storing_objects, "storing_objects", std::uint64_t, kGauge, "objects", \
      "l2_in_flight_objects", "Objects (keys for lookups) in the adapter's calls now, by " \
      "operation: its queue depth as the server sees it; load counts the prefetches loading " \
      "from it.", {"operation", "store"}) \
  X(loading_objects, "loading_objects", std::uint64_t, kGauge, "objects", \
      "l2_in_flight_objects", "", {"operation", "load"}) \
  X(looking_up_keys, "looking_up_keys", std::uint64_t, kGauge, "keys", \
      "l2_in_flight_objects", "", {"operation", "lookup"}) \
  X(store_latency, "store_latency", LatencyHistogram::Snapshot, kHistogram, \
      "µs (seconds in Prometheus)", "l2_call_duration_seconds", "Duration of one batched " \
      "call to the adapter (Store, LookupAndLock, Load), by operation.", \
      {"operation", "store"}) \
  X(lookup_latency, "lookup_latency", LatencyHistogram::Snapshot, kHistogram, \
      "µs (seconds in Prometheus)", "l2_call_duration_seconds", "", {"operation", "lookup"}) \
  X(load_latency, "load_latency", LatencyHistogram::Snapshot, kHistogram, \
      "µs (seconds in Prometheus)", "l2_call_duration_seconds", "", {"operation", "load"})

// ... and the load-or-recompute policy's (tier/load_cost.h), also the meter's.
#define LMC_L2_LOAD_COST_STATS(X, D)                                                           \
  X(load_seconds_per_object, "load_seconds_per_object", double, kGauge, "seconds",             \
    "l2_load_seconds_per_object",                                                              \
    "Moving average of what one object of a load from the "                                    \
    "adapter takes, as the prefetch sees it (its queueing included); 0 before the first "      \
    "load and 30 s after the last. The load-or-recompute policy weighs it "                    \
    "(--prefill-tokens-per-second).")                                                          \
  X(declined_slower_than_recompute, "declined_slower_than_recompute", std::uint64_t, kCounter, \
    "chunks", "l2_declined_slower_than_recompute_chunks_total",                                \
    "Chunks the "                                                                              \
    "adapter held that lookups did not load because recomputing them was cheaper "             \
    "(--prefill-tokens-per-second).")

// ... and its serde's (tier/serde_adapter.h): zero and empty without one.
#define LMC_L2_SERDE_COUNTED_STATS(X, D)                                                        \
  X(serde_encoded_objects, "serde_encoded_objects", std::uint64_t, kCounter, "objects",         \
    "l2_serde_encoded_objects_total", "Objects the adapter's serde stored encoded.")            \
  X(serde_encoded_object_bytes, "serde_encoded_object_bytes", std::uint64_t, kCounter, "bytes", \
    "l2_serde_encoded_object_bytes_total", "What the objects stored encoded held in L1.")       \
  X(serde_encoded_bytes, "serde_encoded_bytes", std::uint64_t, kCounter, "bytes",               \
    "l2_serde_encoded_bytes_total",                                                             \
    "What the objects stored encoded took, headers aside (against "                             \
    "serde_encoded_object_bytes: the compression).")                                            \
  X(serde_raw_objects, "serde_raw_objects", std::uint64_t, kCounter, "objects",                 \
    "l2_serde_raw_objects_total",                                                               \
    "Objects the adapter's serde stored raw: fp8 knew no element type for them (no "            \
    "registration told it, or their parts mix dtypes), or encoding would not save more than "   \
    "a header.")
#define LMC_L2_SERDE_STATS(X, D)                                                        \
  X(serde, "serde", std::string, kText, "", "l2_adapter_serde_info",                    \
    "How the adapter stores objects (its serde: fp8-e4m3, fp8-e5m2, lossless); empty: " \
    "as L1 holds them (always 1).")                                                     \
  LMC_L2_SERDE_COUNTED_STATS(X, D)

#define LMC_L2_ADAPTER_STATS(X, D) \
  LMC_L2_ADAPTER_OWN_STATS(X, D)   \
  LMC_L2_METERED_STATS(X, D) LMC_L2_LOAD_COST_STATS(X, D) LMC_L2_SERDE_STATS(X, D)

struct L2AdapterStats {
  LMC_STATS_MEMBERS(LMC_L2_ADAPTER_STATS)
  bool Healthy() const { return condition.empty(); }
};
std::span<const stats::Row<L2AdapterStats>> L2AdapterStatRows();

// StoreControllerStats's figures, each declared once (stats/declare.h).
#define LMC_L2_STORE_STATS(X, D) \
  X(queued_objects, "queued_objects", std::uint64_t, kGauge, "objects", \
      "l2_store_queue_objects", "New objects waiting to be written to L2.") \
  X(queued_bytes, "queued_bytes", std::uint64_t, kGauge, "bytes", "l2_store_queue_bytes", \
      "Bytes of new objects waiting to be written to L2.") \
  X(in_flight, "in_flight", std::uint64_t, kGauge, "objects", "l2_store_in_flight_objects", \
      "Objects in a batch being written now.") \
  X(stored, "stored", std::uint64_t, kCounter, "objects", "l2_store_submitted_objects_total", \
      "Objects written to every L2 adapter.") \
  X(failed, "failed", std::uint64_t, kCounter, "objects", "l2_store_skipped_total", \
      "New objects not written to L2, by reason.", {"reason", "failed"}) \
  X(skipped_queue_full, "skipped_queue_full", std::uint64_t, kCounter, "objects", \
      "l2_store_skipped_total", "", {"reason", "queue_full"}) \
  X(skipped_gone, "skipped_gone", std::uint64_t, kCounter, "objects", \
      "l2_store_skipped_total", "", {"reason", "gone"}) \
  X(dropped_at_stop, "dropped_at_stop", std::uint64_t, kCounter, "objects", \
      "l2_store_dropped_at_stop_total", \
      "Objects still queued for L2 when the server stopped.") \
  X(deleted_from_l1, "deleted_from_l1", std::uint64_t, kCounter, "objects", \
      "l2_store_deleted_from_l1_total", "Objects deleted from L1 once written to L2 " \
      "(skip_l1 stores).")

struct StoreControllerStats {
  LMC_STATS_MEMBERS(LMC_L2_STORE_STATS)
};
std::span<const stats::Row<StoreControllerStats>> StoreControllerStatRows();
LMC_STATS_COUNTED(StoreControllerCounters, StoreControllerStats, LMC_L2_STORE_STATS);

// PrefetchControllerStats's figures, each declared once (stats/declare.h).
#define LMC_PREFETCH_STATS(X, D)                                                                   \
  X(submitted, "submitted", std::uint64_t, kCounter, "lookups", "l2_prefetch_lookup_total",        \
    "Lookups handed to the prefetch controller.", {}, stats::kEverywhere, {}, stats::kReference)   \
  X(queued, "queued", std::uint64_t, kGauge, "lookups", "l2_prefetch_queued",                      \
    "Prefetches waiting for a worker.")                                                            \
  X(in_flight, "in_flight", std::uint64_t, kGauge, "lookups", "l2_prefetch_in_flight",             \
    "Prefetches running now.")                                                                     \
  D(ActiveJobs(), "active_jobs", kGauge, "lookups", "active_prefetch_jobs",                        \
    "Lookups loading from L2 or waiting to (in_flight + queued).", {}, stats::kPrometheusOnly, {}, \
    stats::kReference)                                                                             \
  X(completed, "completed", std::uint64_t, kCounter, "lookups", "l2_prefetch_completed_total",     \
    "Prefetches finished.")                                                                        \
  X(cancelled, "cancelled", std::uint64_t, kCounter, "lookups", "l2_prefetch_cancelled_total",     \
    "Prefetches cancelled before they finished.")                                                  \
  X(cancelled_loads, "cancelled_loads", std::uint64_t, kCounter, "lookups",                        \
    "l2_prefetch_cancelled_loads_total",                                                           \
    "Of the cancelled prefetches, those whose load "                                               \
    "stopped at its next batch (the rest of the prefix never read).")                              \
  X(refused, "refused", std::uint64_t, kCounter, "lookups", "l2_prefetch_refused_total",           \
    "Prefetches answered at once with their L1 hits because the queue for a prefetch "             \
    "worker was full (65,536 requests or 1 GiB of their keys).")                                   \
  X(l2_hit_chunks, "l2_hit_chunks", std::uint64_t, kCounter, "chunks",                             \
    "lookup_hit_l2_chunks_total",                                                                  \
    "Chunks the L2 lookups found after the L1 prefix (the "                                        \
    "reference's lookup_hit_l2 counts tokens).")                                                   \
  X(loaded_chunks, "loaded_chunks", std::uint64_t, kCounter, "chunks",                             \
    "l2_prefetch_loaded_chunks_total", "Chunks loaded from L2 into L1.")                           \
  X(declined_slower_than_recompute, "declined_slower_than_recompute", std::uint64_t, kCounter,     \
    "chunks", "l2_prefetch_declined_slower_than_recompute_chunks_total",                           \
    "Chunks the L2 lookups found that were not loaded because recomputing them was "               \
    "cheaper (--prefill-tokens-per-second; per adapter in l2.adapters).")                          \
  X(engine_held_chunks, "engine_held_chunks", std::uint64_t, kCounter, "chunks",                   \
    "l2_prefetch_engine_held_chunks_total",                                                        \
    "Chunks the L2 lookups found that the engine "                                                 \
    "already held (lmcache.hint.engine_computed_tokens): counted as hits, not loaded.")            \
  X(load_failed_chunks, "load_failed_chunks", std::uint64_t, kCounter, "chunks",                   \
    "l2_prefetch_failed_chunks_total", "Planned chunks not loaded, by reason.",                    \
    {"reason", "load_failed"})                                                                     \
  X(no_memory_chunks, "no_memory_chunks", std::uint64_t, kCounter, "chunks",                       \
    "l2_prefetch_failed_chunks_total", "", {"reason", "l1_oom"})                                   \
  X(deadline_expired, "deadline_expired", std::uint64_t, kCounter, "lookups",                      \
    "l2_prefetch_deadline_total",                                                                  \
    "Prefetch deadline misses (--l2-prefetch-load-timeout), "                                      \
    "by outcome: prefix (the load stopped at a batch boundary and served what it had), "           \
    "abandoned (still inside an adapter call at twice the deadline: answered with the L1 "         \
    "hits only).",                                                                                 \
    {"outcome", "prefix"})                                                                         \
  X(abandoned_loads, "abandoned_loads", std::uint64_t, kCounter, "lookups",                        \
    "l2_prefetch_deadline_total", "", {"outcome", "abandoned"})                                    \
  X(abandoned_in_flight, "abandoned_in_flight", std::uint64_t, kGauge, "lookups",                  \
    "l2_prefetch_abandoned_in_flight",                                                             \
    "Abandoned prefetches whose adapter call has not "                                             \
    "returned: their L1 buffers stay reserved until it does (a hung backend shows here).")         \
  X(latency, "latency", LatencyHistogram::Snapshot, kHistogram, "µs (seconds in Prometheus)",      \
    "l2_prefetch_duration_seconds", "Time from a lookup's prefetch to its result.")

struct PrefetchControllerStats {
  LMC_STATS_MEMBERS(LMC_PREFETCH_STATS)
  std::uint64_t ActiveJobs() const { return in_flight + queued; }
};
std::span<const stats::Row<PrefetchControllerStats>> PrefetchControllerStatRows();
LMC_STATS_COUNTED(PrefetchControllerCounters, PrefetchControllerStats, LMC_PREFETCH_STATS);

// L2CascadeStats's figures: the cascade's changes at runtime
// (POST and DELETE /config/adapters).
#define LMC_L2_CASCADE_STATS(X, D) \
  X(added, "added", std::uint64_t, kCounter, "adapters", "l2_cascade_changes_total", \
      "L2 adapters added or removed at runtime, by change.", {"change", "added"}) \
  X(removed, "removed", std::uint64_t, kCounter, "adapters", "l2_cascade_changes_total", "", \
      {"change", "removed"}) \
  X(draining, "draining", std::uint64_t, kGauge, "adapters", "l2_draining_adapters", \
      "Removed L2 adapters still finishing the stores and loads that began on them.")

struct L2CascadeStats {
  LMC_STATS_MEMBERS(LMC_L2_CASCADE_STATS)
};
std::span<const stats::Row<L2CascadeStats>> L2CascadeStatRows();
LMC_STATS_COUNTED(L2CascadeCounters, L2CascadeStats, LMC_L2_CASCADE_STATS);

// What the tier reports: each adapter (in cascade order), the cascade's
// changes, the write-behind and the prefetch.
struct L2Stats {
  std::vector<L2AdapterStats> adapters;
  L2CascadeStats cascade;
  StoreControllerStats store;
  PrefetchControllerStats prefetch;
};

}  // namespace lmcache::tier
