// The fleet's figures, each declared once (stats/declare.h): the owner side
// of the peers' lookups (PeerTasks).
//
// Thread-safety: plain values; the generated counter set is relaxed atomics.
#pragma once

#include <cstdint>
#include <span>

#include "stats/declare.h"

namespace lmcache::fleet {

// PeerTaskStats's figures, each declared once (stats/declare.h).
#define LMC_PEER_TASK_STATS(X, D) \
  X(tasks, "tasks", std::uint64_t, kGauge, "tasks", "p2p_served_tasks", \
      "Peers' lookups held now (not yet queried, or holding locks).") \
  X(locked_objects, "locked_objects", std::uint64_t, kGauge, "objects", \
      "p2p_served_locked_objects", "Objects peers hold read locks on now.") \
  X(locked_bytes, "locked_bytes", std::uint64_t, kGauge, "bytes", "p2p_served_locked_bytes", \
      "Bytes of the objects peers hold read locks on now.") \
  X(lookups, "lookups", std::uint64_t, kCounter, "lookups", "p2p_served_lookups_total", \
      "p2p_lookup_and_lock calls served.") \
  X(requested_keys, "requested_keys", std::uint64_t, kCounter, "keys", \
      "p2p_served_requested_keys_total", "Keys peers asked for.") \
  X(hit_keys, "hit_keys", std::uint64_t, kCounter, "keys", "p2p_served_hit_keys_total", \
      "Keys peers asked for that were resident and locked for them.") \
  X(size_mismatches, "size_mismatches", std::uint64_t, kCounter, "keys", \
      "p2p_served_size_mismatches_total", "Keys held here in another size than the peer's " \
      "layout says: answered as misses.") \
  X(unservable_keys, "unservable_keys", std::uint64_t, kCounter, "keys", \
      "p2p_served_unservable_keys_total", "Keys no object could match: refused by the " \
      "store's key rules, in a group the lookup gave no usable layout for, or in a lookup " \
      "whose groups had different numbers of keys (the reference's rule): misses.") \
  X(refused_keys, "refused_keys", std::uint64_t, kCounter, "keys", \
      "p2p_served_refused_keys_total", "Keys answered as misses because their peer was at its " \
      "bound of tasks or locked bytes.") \
  X(untrusted_keys, "untrusted_keys", std::uint64_t, kCounter, "keys", \
      "p2p_served_untrusted_keys_total", "Keys asked for over a connection that had not " \
      "proved the fleet key (--p2p-auth-key-file): answered as misses, nothing locked.") \
  X(reaped_tasks, "reaped_tasks", std::uint64_t, kCounter, "tasks", \
      "p2p_served_reaped_tasks_total", "Lookups their peer never queried within " \
      "--p2p-lookup-timeout: ended with their locks.") \
  X(displaced_tasks, "displaced_tasks", std::uint64_t, kCounter, "tasks", \
      "p2p_served_displaced_tasks_total", "Lookups ended unqueried to keep their peer within " \
      "its bound of tasks (the oldest holding no lock goes first).") \
  X(unknown_queries, "unknown_queries", std::uint64_t, kCounter, "queries", \
      "p2p_served_unknown_queries_total", "p2p_query_lookup_results for a task the asking " \
      "peer does not have (answered already, reaped, or never its own).") \
  X(unlocked, "unlocked", std::uint64_t, kCounter, "locks", "p2p_served_unlocked_total", \
      "Locks peers released with p2p_unlock_objects.") \
  X(stale_unlocks, "stale_unlocks", std::uint64_t, kCounter, "keys", \
      "p2p_served_stale_unlocks_total", "Keys in an unlock that the peer held no lock on " \
      "(a duplicate or late unlock): nothing released.")

struct PeerTaskStats {
  LMC_STATS_MEMBERS(LMC_PEER_TASK_STATS)
};
std::span<const stats::Row<PeerTaskStats>> PeerTaskStatRows();
LMC_STATS_COUNTED(PeerTaskCounters, PeerTaskStats, LMC_PEER_TASK_STATS);

}  // namespace lmcache::fleet
