// The store's figures, each declared once (stats/declare.h): the object
// table's levels, the flow of objects into and out of L1 (counted by
// FlowCounters), the evictor's passes (counted by the Evictor), the slot
// journal's records, and the pool's pre-faulting.
//
// Thread-safety: plain values; the generated counter sets are relaxed
// atomics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include <span>

#include "common/clock.h"
#include "stats/declare.h"

namespace lmcache::store {

// TableStats's figures, each declared once (stats/declare.h).
#define LMC_TABLE_STATS(X, D) \
  X(resident_bytes, "resident_bytes", std::uint64_t, kGauge, "bytes", "l1_resident_bytes", \
      "L1 bytes of readable objects.") \
  X(staging_bytes, "staging_bytes", std::uint64_t, kGauge, "bytes", "l1_staging_bytes", \
      "L1 bytes staged by writers, not yet committed.", {}, stats::kEverywhere, {}, \
      stats::kReference) \
  X(locked_bytes, "locked_bytes", std::uint64_t, kGauge, "bytes", "l1_locked_bytes", \
      "L1 bytes under a live read or write lease.") \
  X(retired_bytes, "retired_bytes", std::uint64_t, kGauge, "bytes", "l1_retired_bytes", \
      "L1 bytes deleted while locked, freed when their lease ends.") \
  X(resident_objects, "resident_objects", std::uint64_t, kGauge, "objects", \
      "l1_resident_objects", "Objects readable in L1.") \
  X(staging_objects, "staging_objects", std::uint64_t, kGauge, "objects", \
      "l1_staging_objects", "Objects staged by writers, not yet committed.") \
  X(locked_objects, "locked_objects", std::uint64_t, kGauge, "objects", "l1_locked_objects", \
      "Objects under a live read or write lease.") \
  X(retired_objects, "retired_objects", std::uint64_t, kGauge, "objects", \
      "l1_retired_objects", "Objects deleted while locked, freed when their lease ends.") \
  X(quarantined_objects, "quarantined_objects", std::uint64_t, kGauge, "objects", \
      "l1_quarantined_objects", "Objects a worker staged and did not commit within its " \
      "write lease, kept from reuse until the worker's registration ends.") \
  X(quarantined_bytes, "quarantined_bytes", std::uint64_t, kGauge, "bytes", \
      "l1_quarantined_bytes", "L1 bytes a worker staged and did not commit within " \
      "--l1-write-ttl-seconds: kept from reuse (the worker might still write them) until " \
      "its registration ends (unregister, disconnect, reaper); a value that grows names a " \
      "stalled worker.") \
  X(read_locks, "read_locks", std::uint64_t, kGauge, "locks", "l1_read_locks", \
      "Live read locks summed over resident objects.") \
  X(read_leases, "read_leases", std::uint64_t, kGauge, "leases", "l1_read_leases", \
      "Live read leases.") \
  X(write_leases, "write_leases", std::uint64_t, kGauge, "leases", "l1_write_leases", \
      "Live write leases.") \
  X(expired_writes_reclaimed, "expired_writes_reclaimed", std::uint64_t, kCounter, "objects", \
      "l1_expired_writes_reclaimed_total", "Staged objects freed (or quarantined) because " \
      "their write lease expired.") \
  X(on_demand_evictions, "on_demand_evictions", std::uint64_t, kCounter, "reservations", \
      "l1_on_demand_evictions_total", "Stores that had to evict to make room.") \
  X(served_once_objects, "served_once_objects", std::uint64_t, kGauge, "objects", \
      "l1_served_once_objects", "Objects admitted only for the readers that asked for them " \
      "(chunks loaded from peers with --p2p-keep-loaded false): freed with their last lock.") \
  X(served_once_dropped, "served_once_dropped", std::uint64_t, kCounter, "objects", \
      "l1_served_once_dropped_total", "Served-once objects freed once their last lock was " \
      "released or expired.") \
  X(over_quota_objects, "over_quota_objects", std::uint64_t, kCounter, "objects", \
      "l1_over_quota_objects_total", "Copies refused L1 memory because their tenant was at " \
      "its quota with nothing of its own left to evict (--quota-mode).") \
  X(quota_evictions, "quota_evictions", std::uint64_t, kCounter, "objects", \
      "l1_quota_evictions_total", "Objects evicted to keep their own tenant within its quota " \
      "(never another tenant's).") \
  X(pinned_objects, "pinned_objects", std::uint64_t, kGauge, "objects", "l1_pinned_objects", \
      "Objects with a pin (POST /cache/pins): never evicted until unpinned.") \
  X(pinned_bytes, "pinned_bytes", std::uint64_t, kGauge, "bytes", "l1_pinned_bytes", \
      "Aligned bytes of the pinned objects (at most --max-pinned-fraction of the pool).")

struct TableStats {
  LMC_STATS_MEMBERS(LMC_TABLE_STATS)
};
std::span<const stats::Row<TableStats>> TableStatRows();
LMC_STATS_COUNTED(TableCounters, TableStats, LMC_TABLE_STATS);

// FlowStats's figures, each declared once (stats/declare.h).
#define LMC_FLOW_STATS(X, D) \
  X(admitted_objects, "admitted_objects", std::uint64_t, kCounter, "objects", \
      "l1_write_total", "Objects admitted into L1, by where they came from (a client's " \
      "store, or a load from L2).", {"source", "client"}, stats::kEverywhere, {}, \
      stats::kReference) \
  X(admitted_bytes, "admitted_bytes", std::uint64_t, kCounter, "bytes", \
      "l1_write_bytes_total", "Bytes admitted into L1, by where they came from.", \
      {"source", "client"}) \
  X(tier_admitted_objects, "tier_admitted_objects", std::uint64_t, kCounter, "objects", \
      "l1_write_total", "", {"source", "l2"}) \
  X(tier_admitted_bytes, "tier_admitted_bytes", std::uint64_t, kCounter, "bytes", \
      "l1_write_bytes_total", "", {"source", "l2"}) \
  X(deleted_objects, "deleted_objects", std::uint64_t, kCounter, "objects", \
      "l1_deleted_total", "Objects deleted from L1 (clear, delete).") \
  X(deleted_bytes, "deleted_bytes", std::uint64_t, kCounter, "bytes", \
      "l1_deleted_bytes_total", "Bytes deleted from L1 (clear, delete).") \
  X(evicted_objects, "evicted_objects", std::uint64_t, kCounter, "objects", \
      "l1_evicted_total", "Objects evicted from L1 (background and on demand).", {}, \
      stats::kEverywhere, {}, stats::kReference) \
  X(evicted_bytes, "evicted_bytes", std::uint64_t, kCounter, "bytes", \
      "l1_evicted_bytes_total", "Bytes evicted from L1.")

struct FlowStats {
  LMC_STATS_MEMBERS(LMC_FLOW_STATS)
};
std::span<const stats::Row<FlowStats>> FlowStatRows();
LMC_STATS_COUNTERS(FlowCounterSet, FlowStats, LMC_FLOW_STATS);

// EvictorStats's figures, each declared once (stats/declare.h).
#define LMC_EVICTOR_STATS(X, D) \
  X(passes, "passes", std::uint64_t, kCounter, "passes", "l1_eviction_loop_ticks_total", \
      "Background eviction passes.", {}, stats::kEverywhere, {}, stats::kReference) \
  X(triggered_passes, "triggered_passes", std::uint64_t, kCounter, "passes", \
      "l1_eviction_loop_triggered_total", "Passes that found usage over the trigger.", {}, \
      stats::kEverywhere, {}, stats::kReference) \
  X(errors, "errors", std::uint64_t, kCounter, "passes", "l1_eviction_loop_errors_total", \
      "Passes that failed (the loop goes on).") \
  X(evicted_objects, "background_evicted_objects", std::uint64_t, kCounter, "objects", \
      "l1_background_evicted_total", "Objects the background passes evicted.") \
  X(evicted_bytes, "background_evicted_bytes", std::uint64_t, kCounter, "bytes", \
      "l1_background_evicted_bytes_total", "Bytes the background passes evicted.") \
  X(nudges, "nudged_passes", std::uint64_t, kCounter, "passes", \
      "l1_eviction_loop_nudged_total", \
      "Passes started early by an admission over the trigger.") \
  X(reclaimed_objects, "reclaimed_objects", std::uint64_t, kCounter, "objects", \
      "l1_reclaimed_total", "Objects the passes freed from expired write leases and ended " \
      "retirements.") \
  X(last_copy_checked, "last_copy_checked", std::uint64_t, kCounter, "objects", \
      "l1_last_copy_checked_total", "Eviction candidates the last-copy bias looked up in the " \
      "P2P directory (--p2p-last-copy-bias).") \
  X(last_copy_expendable, "last_copy_expendable", std::uint64_t, kCounter, "objects", \
      "l1_last_copy_expendable_total", "Of those, candidates another node holds and keeps " \
      "longer: evicted before older ones.") \
  X(last_copies_spared, "last_copies_spared", std::uint64_t, kCounter, "objects", \
      "l1_last_copies_spared_total", "Objects plain LRU would have evicted that a pass kept " \
      "(the fleet's last copies; one kept through several passes counts in each).") \
  X(last_success_wall_seconds, "last_success_unix_seconds", double, kGauge, "seconds", \
      "l1_eviction_last_success_timestamp_seconds", "Unix time of the last completed " \
      "eviction pass (0: none yet).")

struct EvictorStats {
  LMC_STATS_MEMBERS(LMC_EVICTOR_STATS)
  TimeMs last_run_ms = 0;  // steady time of the thread's last pass (its heartbeat); 0 = none
  TimeMs interval_ms = 0;
};
std::span<const stats::Row<EvictorStats>> EvictorStatRows();
LMC_STATS_COUNTERS(EvictorCounters, EvictorStats, LMC_EVICTOR_STATS);

// JournalStats's figures, each declared once (stats/declare.h).
#define LMC_JOURNAL_STATS(X, D) \
  X(records, "journal_records", std::uint64_t, kGauge, "objects", "restart_journal_records", \
      "Slots the crash-recovery journal records as lent or resident (--recover-pool).") \
  LMC_JOURNAL_COUNTED_STATS(X, D)

// What the journal counts as it goes (the records it measures when asked).
#define LMC_JOURNAL_COUNTED_STATS(X, D) \
  X(sealed, "journal_sealed", std::uint64_t, kGauge, "objects", "restart_journal_sealed", \
      "Resident objects whose checksum is recorded: what a recovery would serve now.") \
  X(awaiting_seal, "journal_awaiting_seal", std::uint64_t, kGauge, "objects", \
      "restart_journal_awaiting_seal", "Committed objects whose checksum the sealer has not " \
      "computed yet.") \
  X(sealed_bytes_total, "journal_sealed_bytes", std::uint64_t, kCounter, "bytes", \
      "restart_journal_sealed_bytes_total", "Bytes the sealer has checksummed since start.") \
  X(unrecorded, "journal_unrecorded", std::uint64_t, kCounter, "objects", \
      "restart_journal_unrecorded_total", "Objects not recoverable because their key did " \
      "not fit the journal's namespace area.")

struct JournalStats {
  LMC_STATS_MEMBERS(LMC_JOURNAL_STATS)
};
std::span<const stats::Row<JournalStats>> JournalStatRows();
LMC_STATS_COUNTERS(JournalCounters, JournalStats, LMC_JOURNAL_COUNTED_STATS);

// PrefaultProgress's figures, each declared once (stats/declare.h).
#define LMC_PREFAULT_STATS(X, D) \
  X(ready_bytes, "prefault_ready_bytes", std::uint64_t, kGauge, "bytes", \
    "l1_prefault_ready_bytes", "Pool bytes pre-faulted and usable.") \
  D(ReadyRatio(), "prefault_ratio", kGauge, "ratio", "l1_prefault_ratio", \
    "Fraction of the pool pre-faulted and usable (1 once startup pre-faulting is done).", \
    {}, stats::kPrometheusOnly) \
  X(done, "prefault_done", bool, kGauge, "bool", "l1_prefault_done", \
    "1 once startup pre-faulting is done.") \
  X(seconds, "prefault_seconds", double, kGauge, "seconds", "l1_prefault_seconds", \
    "Seconds pre-faulting took (so far, or in all once done).") \
  X(huge_page_bytes, "huge_page_bytes", std::uint64_t, kGauge, "bytes", "l1_huge_page_bytes", \
    "Bytes of the pool the kernel maps with huge pages, measured once pre-faulting is " \
    "done (0 with 4 KiB pages; see docs/deploy/README.md).")

// How far pre-faulting got: `ready_bytes` of `total_bytes` are usable.
struct PrefaultProgress {
  LMC_STATS_MEMBERS(LMC_PREFAULT_STATS)
  double ReadyRatio() const;  // ready over total bytes (0 for no pool)
  std::uint64_t total_bytes = 0;
  bool failed = false;  // /dev/shm ran out: the pool stays at ready_bytes
};
std::span<const stats::Row<PrefaultProgress>> PrefaultStatRows();

// QuotaStats's figures, each declared once (stats/declare.h). Tenants with a
// quota are named (TenantQuotaStats); every other tenant is counted here
// together, so the number of series stays bounded by the quotas set.
#define LMC_QUOTA_STATS(X, D) \
  X(mode, "mode", std::string, kText, "", "quota_mode_info", \
    "--quota-mode: on, allowlist or off (always 1).") \
  X(tenants_with_quota, "tenants_with_quota", std::uint64_t, kGauge, "tenants", \
    "quota_tenants", "Tenants (cache_salt) with an L1 quota.") \
  X(other_tenants, "other_tenants", std::uint64_t, kGauge, "tenants", "quota_other_tenants", \
    "Tenants without a quota that hold L1 bytes.") \
  X(other_used_bytes, "other_used_bytes", std::uint64_t, kGauge, "bytes", \
    "quota_other_used_bytes", "L1 bytes, staged and resident, of tenants without a quota.") \
  X(other_refused_objects, "other_refused_objects", std::uint64_t, kCounter, "objects", \
    "quota_other_refused_objects_total", "Copies of tenants without a quota refused " \
    "(--quota-mode allowlist).")

// TenantQuotaStats's figures, each declared once (stats/declare.h).
#define LMC_TENANT_QUOTA_STATS(X, D) \
  X(limit_bytes, "limit_bytes", std::uint64_t, kGauge, "bytes", "quota_limit_bytes", \
    "The tenant's L1 quota.") \
  X(used_bytes, "used_bytes", std::uint64_t, kGauge, "bytes", "quota_used_bytes", \
    "L1 bytes the tenant holds, staged and resident.") \
  X(refused_objects, "refused_objects", std::uint64_t, kCounter, "objects", \
    "quota_refused_objects_total", "Copies refused because the tenant was at its quota " \
    "with nothing of its own left to evict.") \
  X(refused_bytes, "refused_bytes", std::uint64_t, kCounter, "bytes", \
    "quota_refused_bytes_total", "Bytes of those copies.") \
  X(quota_evicted_objects, "quota_evicted_objects", std::uint64_t, kCounter, "objects", \
    "quota_evicted_objects_total", "The tenant's own objects evicted to keep it within its " \
    "quota.") \
  X(quota_evicted_bytes, "quota_evicted_bytes", std::uint64_t, kCounter, "bytes", \
    "quota_evicted_bytes_total", "Bytes of those objects.")

struct TenantQuotaStats {
  std::string salt;  // "_default" for the empty salt
  LMC_STATS_MEMBERS(LMC_TENANT_QUOTA_STATS)
};
std::span<const stats::Row<TenantQuotaStats>> TenantQuotaStatRows();

struct QuotaStats {
  LMC_STATS_MEMBERS(LMC_QUOTA_STATS)
  std::vector<TenantQuotaStats> tenants;  // by salt
};
std::span<const stats::Row<QuotaStats>> QuotaStatRows();

}  // namespace lmcache::store
