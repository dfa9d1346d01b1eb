// The fleet's figures, each declared once (stats/declare.h): the owner side
// of the peers' lookups (PeerTasks), the peers of --p2p-peers (Membership),
// our calls to them (PeerRpc) and the data channel (UcxChannel).
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
  X(abandoned_tasks, "abandoned_tasks", std::uint64_t, kCounter, "tasks", \
      "p2p_served_abandoned_tasks_total", "Lookups their requester ended unused with " \
      "p2p_end_task (its answer came past its deadline, or was unusable): ended with their " \
      "locks at once instead of at the read TTL.") \
  X(ended_life_tasks, "ended_life_tasks", std::uint64_t, kCounter, "tasks", \
      "p2p_served_ended_life_tasks_total", "Lookups ended with their locks because their " \
      "requester restarted: its new life said hello and no connection of the old one was open.") \
  X(closed_connection_tasks, "closed_connection_tasks", std::uint64_t, kCounter, "tasks", \
      "p2p_served_closed_connection_tasks_total", "Lookups ended with their locks because the " \
      "connection they came on closed without ever saying which requester it speaks for " \
      "(p2p_hello; a reference requester): no other connection could reach them.") \
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

// MembershipStats's figures: the peers of --p2p-peers by state, measured
// when asked, and what membership counted.
#define LMC_MEMBERSHIP_STATS(X, D)                                                         \
  X(connecting, "connecting", std::uint64_t, kGauge, "peers", "p2p_peers_connecting",      \
    "Peers of --p2p-peers not met yet (no handshake answered).")                           \
  X(ready, "ready", std::uint64_t, kGauge, "peers", "p2p_peers_ready",                     \
    "Peers met, compatible and answering: the ones asked for chunks.")                     \
  X(excluded, "excluded", std::uint64_t, kGauge, "peers", "p2p_peers_excluded",            \
    "Peers whose hashing or fleet key differs from ours, that cut no model into our "      \
    "chunks, or this server itself at another address: never asked; /status says why.")    \
  X(unreachable, "unreachable", std::uint64_t, kGauge, "peers", "p2p_peers_unreachable",   \
    "Peers whose last handshake or probe went unanswered: never asked until they answer "  \
    "a probe again.")                                                                      \
  X(new_lives, "restarts", std::uint64_t, kCounter, "restarts", "p2p_peer_restarts_total", \
    "Peers seen with a new boot id (restarted): what we knew of the old life dropped.")    \
  X(resolve_failures, "resolve_failures", std::uint64_t, kCounter, "resolutions",          \
    "p2p_peer_resolve_failures_total",                                                     \
    "dns:// peer names that did not resolve (the last "                                    \
    "answer was kept).")                                                                   \
  X(refused, "refused", std::uint64_t, kGauge, "peers", "p2p_peers_refused",               \
    "Peers the sources list beyond --p2p-max-peers: not met (logged; a flooded etcd "      \
    "prefix shows here).")

struct MembershipStats {
  LMC_STATS_MEMBERS(LMC_MEMBERSHIP_STATS)
};
std::span<const stats::Row<MembershipStats>> MembershipStatRows();

// PeerRpcStats's figures: our calls to peers' fleet endpoints.
#define LMC_PEER_RPC_STATS(X, D) \
  X(peers, "connections", std::uint64_t, kGauge, "connections", "p2p_rpc_connections", \
      "Connections to peers' fleet endpoints open now.") \
  X(calls, "calls", std::uint64_t, kCounter, "calls", "p2p_rpc_calls_total", \
      "Calls made to peers (handshakes, probes, lookups, queries, unlocks).") \
  X(replies, "replies", std::uint64_t, kCounter, "calls", "p2p_rpc_replies_total", \
      "Calls a peer answered in time (with a value or an error).") \
  X(timeouts, "timeouts", std::uint64_t, kCounter, "calls", "p2p_rpc_timeouts_total", \
      "Calls ended at their deadline unanswered.") \
  X(unsent, "unsent", std::uint64_t, kCounter, "calls", "p2p_rpc_unsent_total", \
      "Calls that could not be queued to their peer (no connection, queue full).") \
  X(closed_calls, "closed_calls", std::uint64_t, kCounter, "calls", "p2p_rpc_closed_calls_total", \
      "Calls ended when their peer's connection closed (it died, restarted or refused our " \
      "key): no reply could come, so none is waited for until the deadline.") \
  X(late_replies, "late_replies", std::uint64_t, kCounter, "replies", \
      "p2p_rpc_late_replies_total", "Replies for calls that had ended (past their deadline): " \
      "dropped.") \
  X(stray_replies, "stray_replies", std::uint64_t, kCounter, "replies", \
      "p2p_rpc_stray_replies_total", "Replies that matched no call (malformed, or another " \
      "operation's): dropped.")

struct PeerRpcStats {
  LMC_STATS_MEMBERS(LMC_PEER_RPC_STATS)
};
std::span<const stats::Row<PeerRpcStats>> PeerRpcStatRows();
LMC_STATS_COUNTERS(PeerRpcCounters, PeerRpcStats, LMC_PEER_RPC_STATS);

// UcxChannelStats's figures: the data channel, as requester and as owner.
#define LMC_UCX_CHANNEL_STATS(X, D) \
  X(peers, "endpoints", std::uint64_t, kGauge, "endpoints", "p2p_channel_endpoints", \
      "Data channel endpoints open to peers.") \
  X(reads, "reads", std::uint64_t, kCounter, "batches", "p2p_channel_reads_total", \
      "Batches of reads from peers ended (either way).") \
  X(read_bytes, "read_bytes", std::uint64_t, kCounter, "bytes", "p2p_channel_read_bytes_total", \
      "Bytes of batches read from peers that succeeded.") \
  X(failed_reads, "failed_reads", std::uint64_t, kCounter, "batches", \
      "p2p_channel_failed_reads_total", "Batches that failed (peer error, deadline, refused).") \
  X(deadline_reads, "deadline_reads", std::uint64_t, kCounter, "batches", \
      "p2p_channel_deadline_reads_total", "Of the failed batches, those past their deadline.") \
  X(refused_reads, "refused_reads", std::uint64_t, kCounter, "batches", \
      "p2p_channel_refused_reads_total", "Of the failed batches, those outside a pool: never " \
      "sent.") \
  X(served_reads, "served_reads", std::uint64_t, kCounter, "reads", \
      "p2p_channel_served_reads_total", "Peers' read requests answered with bytes of our pool.") \
  X(served_bytes, "served_bytes", std::uint64_t, kCounter, "bytes", \
      "p2p_channel_served_bytes_total", "Bytes of our pool sent to peers.") \
  X(refused_serves, "refused_serves", std::uint64_t, kCounter, "reads", \
      "p2p_channel_refused_serves_total", "Peers' read requests refused: a bad MAC, a range " \
      "outside our pool, or a malformed request.") \
  X(unheld_serves, "unheld_serves", std::uint64_t, kCounter, "reads", \
      "p2p_channel_unheld_serves_total", "Peers' read requests refused because the lookup task " \
      "they name holds no lock on that object now (released, reaped, or a task of our previous " \
      "life).") \
  X(late_replies, "late_replies", std::uint64_t, kCounter, "replies", \
      "p2p_channel_late_replies_total", "Read replies for reads that had ended (or that no " \
      "read of ours had in flight): dropped.") \
  X(forged_replies, "forged_replies", std::uint64_t, kCounter, "replies", \
      "p2p_channel_forged_replies_total", "Read replies whose header was malformed or whose MAC " \
      "did not hold under the fleet's data key: dropped, the read goes on waiting.") \
  X(foreign_replies, "foreign_replies", std::uint64_t, kCounter, "replies", \
      "p2p_channel_foreign_replies_total", "Read replies that came on another endpoint than " \
      "the one their read was sent on: dropped, the read goes on waiting.") \
  X(corrupt_replies, "corrupt_replies", std::uint64_t, kCounter, "replies", \
      "p2p_channel_corrupt_replies_total", "Read replies whose bytes did not match the owner's " \
      "digest of them (or that carried none when asked): the read failed, its slot unused.")

struct UcxChannelStats {
  LMC_STATS_MEMBERS(LMC_UCX_CHANNEL_STATS)
};
std::span<const stats::Row<UcxChannelStats>> UcxChannelStatRows();

// P2pDirectoryStats's figures (issue 43): the directory of which peers may
// hold which chunks (PeerDirectory counts and measures these), then its feed
// from the peers' chunk logs and this server's chunk log that its peers
// read. The feed counts gaps and new lives it sees in pages, the directory
// those it sees in records: each figure is the sum of both.
#define LMC_PEER_DIRECTORY_STATS(X, D) \
  X(peers, "peers", std::uint64_t, kGauge, "peers", "p2p_directory_peers", \
      "Peers the directory keeps a filter for.") \
  X(stale_peers, "stale_peers", std::uint64_t, kGauge, "peers", "p2p_directory_stale_peers", \
      "Peers whose filter is not in step with their log (being listed, after a gap, a new " \
      "life or a full filter): asked for every chunk, as under broadcast.") \
  X(chunks, "chunks", std::uint64_t, kGauge, "chunks", "p2p_directory_chunks", \
      "Chunks across the peers' filters.") \
  X(memory_bytes, "memory_bytes", std::uint64_t, kGauge, "bytes", "p2p_directory_memory_bytes", \
      "Memory of the peers' filters.") \
  X(applied_events, "applied_records", std::uint64_t, kCounter, "records", \
      "p2p_directory_applied_records_total", "Records of peers' chunk logs applied in step.") \
  X(gaps, "gaps", std::uint64_t, kCounter, "gaps", "p2p_directory_gaps_total", \
      "Records missing from a peer's feed (its log moved past our cursor): the peer is " \
      "listed again.") \
  X(incarnations, "new_lives", std::uint64_t, kCounter, "lives", \
      "p2p_directory_new_lives_total", "Peers' logs seen with a new incarnation (a restart).") \
  X(full_inserts, "full_inserts", std::uint64_t, kCounter, "chunks", \
      "p2p_directory_full_inserts_total", "Chunks a peer's full filter could not take: the " \
      "peer is listed again into a filter twice the size.")

#define LMC_DIRECTORY_FEED_STATS(X, D) \
  X(resyncs, "resyncs", std::uint64_t, kCounter, "listings", "p2p_directory_resyncs_total", \
      "Listings of a peer's L1 begun (at first contact, after a gap, a new life, a full " \
      "filter or a malformed answer).") \
  X(listed_chunks, "listed_chunks", std::uint64_t, kCounter, "chunks", \
      "p2p_directory_listed_chunks_total", "Chunks received in listings of peers' L1.") \
  X(polls, "polls", std::uint64_t, kCounter, "calls", "p2p_directory_polls_total", \
      "p2p_chunk_events and p2p_chunk_listing calls made to peers.") \
  X(poll_failures, "poll_failures", std::uint64_t, kCounter, "calls", \
      "p2p_directory_poll_failures_total", "Of those, the ones unanswered, refused, or " \
      "answered with what could not be decoded (asked again later).") \
  X(feed_bytes, "feed_bytes", std::uint64_t, kCounter, "bytes", "p2p_directory_feed_bytes_total", \
      "Bytes of the answers to those calls: what following the fleet costs this server.") \
  X(forgotten_peers, "forgotten_peers", std::uint64_t, kCounter, "peers", \
      "p2p_directory_forgotten_peers_total", "Peers dropped from the directory when they " \
      "stopped being ready (left, unreachable, excluded).") \
  X(log_last_seq, "log_last_seq", std::uint64_t, kGauge, "records", "p2p_chunk_log_last_seq", \
      "The number of the last record of this server's chunk log (what its L1 gained and " \
      "lost, read by its peers' directories).") \
  X(log_chunks, "log_chunks", std::uint64_t, kGauge, "chunks", "p2p_chunk_log_chunks", \
      "Chunk ids kept in this server's chunk log now.") \
  X(log_dropped_records, "log_dropped_records", std::uint64_t, kCounter, "records", \
      "p2p_chunk_log_dropped_records_total", "Records dropped from this server's chunk log " \
      "to keep it within its bound (a peer that had not read them lists our L1 again).")

#define LMC_P2P_DIRECTORY_STATS(X, D) LMC_PEER_DIRECTORY_STATS(X, D) LMC_DIRECTORY_FEED_STATS(X, D)

struct P2pDirectoryStats {
  LMC_STATS_MEMBERS(LMC_P2P_DIRECTORY_STATS)
};
std::span<const stats::Row<P2pDirectoryStats>> P2pDirectoryStatRows();

// P2pLookupStats's figures: what the p2p adapter's lookups asked and found,
// in either mode (--p2p-lookup), so the two compare on the same figures.
#define LMC_P2P_LOOKUP_STATS(X, D) \
  X(lookups, "lookups", std::uint64_t, kCounter, "lookups", "p2p_lookups_total", \
      "Lookups of the p2p adapter with at least one ready peer.") \
  X(rpcs, "rpcs", std::uint64_t, kCounter, "calls", "p2p_lookup_rpcs_total", \
      "p2p_lookup_and_lock calls those lookups made (one per peer asked).") \
  X(found_chunks, "found_chunks", std::uint64_t, kCounter, "keys", \
      "p2p_lookup_found_keys_total", "Keys those lookups found locked at a peer.") \
  X(missed_keys, "missed_keys", std::uint64_t, kCounter, "keys", "p2p_lookup_missed_keys_total", \
      "Keys those lookups found nowhere.") \
  X(unnamed_keys, "unnamed_keys", std::uint64_t, kCounter, "keys", \
      "p2p_lookup_unnamed_keys_total", "Keys no peer was asked for: the directory named none " \
      "(directed lookups only).") \
  X(wrong_hints, "wrong_hints", std::uint64_t, kCounter, "keys", "p2p_lookup_wrong_hints_total", \
      "Keys asked at a peer the directory named (in step), which did not have them: a filter's " \
      "false positive, or an eviction not yet read.")

struct P2pLookupStats {
  LMC_STATS_MEMBERS(LMC_P2P_LOOKUP_STATS)
};
std::span<const stats::Row<P2pLookupStats>> P2pLookupStatRows();
LMC_STATS_COUNTERS(P2pLookupCounters, P2pLookupStats, LMC_P2P_LOOKUP_STATS);

// EtcdStats's figures: membership through etcd (--p2p-peers etcd://...),
// summed over the etcd prefixes listed (usually one).
#define LMC_ETCD_STATS(X, D) \
  X(reachable, "reachable", std::uint64_t, kGauge, "prefixes", "p2p_etcd_reachable", \
      "etcd prefixes whose last call was answered (0 while etcd is out of reach: the last " \
      "membership stands).") \
  X(registered, "registered", std::uint64_t, kGauge, "prefixes", "p2p_etcd_registered", \
      "etcd prefixes this server is registered under with a live lease.") \
  X(peers, "peers", std::uint64_t, kGauge, "peers", "p2p_etcd_peers", \
      "Peers in the last listings of the etcd prefixes (this server excluded).") \
  X(failures, "failures", std::uint64_t, kCounter, "calls", "p2p_etcd_failures_total", \
      "etcd calls that failed at every endpoint of their cluster.") \
  X(lease_grants, "lease_grants", std::uint64_t, kCounter, "leases", \
      "p2p_etcd_lease_grants_total", "Leases granted: one at start, one more each time the " \
      "last lapsed (etcd out of reach past the TTL).") \
  X(listings, "listings", std::uint64_t, kCounter, "listings", "p2p_etcd_listings_total", \
      "Listings of the etcd prefixes that succeeded.") \
  X(bad_entries, "bad_entries", std::uint64_t, kCounter, "entries", \
      "p2p_etcd_bad_entries_total", "Values under an etcd prefix that were not a tcp:// fleet " \
      "URL: skipped.")

struct EtcdStats {
  LMC_STATS_MEMBERS(LMC_ETCD_STATS)
};
std::span<const stats::Row<EtcdStats>> EtcdStatRows();
// The totals over several prefixes (each --p2p-etcd-prefix its registry).
LMC_STATS_SUM(AddEtcdStats, EtcdStats, LMC_ETCD_STATS)

}  // namespace lmcache::fleet
