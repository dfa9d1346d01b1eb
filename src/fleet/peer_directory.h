// PeerDirectory: which peers may hold which chunks, so that a miss asks the
// peers likely to have it instead of every peer (issue 43, section 1: the
// reference broadcasts, p2p-spec.md section 0).
//
// One ChunkFilter per peer (chunk_filter.h: 2.5 bytes per chunk, so a
// peer's 1 M chunks take 2.4 MiB and 100 such peers 238 MiB), fed by
// that peer's KV events of its L1 ("CPU"): stored chunks are inserted,
// removed ones erased, a clear empties the filter. Each peer's events carry
// an incarnation (its start) and consecutive sequence numbers:
//   * a new incarnation empties the filter (what the old process held is
//     gone) and takes its events from then on;
//   * a gap (an event lost, the feed fell behind the peer's log) marks the
//     peer stale: its filter is kept but known incomplete, and a stale peer
//     is named for every chunk (asked as under broadcast) until the feed
//     resynchronises it (Resynced, after replaying the peer's events into
//     an emptied filter);
//   * a full filter also marks the peer stale (it is sized from the chunks
//     the peer says it can hold; Resize gives it a bigger one to fill).
// A departed peer is forgotten at once: its filter is freed (ForgetPeer).
//
// A chunk id folds the model and the tenant (cache_salt, which a lookup's
// keys carry as the holder's do) into the chunk hash (ModelSeed, ChunkIdOf),
// so two models' or two tenants' equal chunks have different ids. Not the
// KV rank, object group or layout: one id stands for all of a chunk's
// objects (chunk_log.h), so a fleet's directory grows with its chunks, not
// with its tensor-parallel degree.
//
// Thread-safety: every method from any thread. Lookups (MayHold, Prefixes)
// read the filters lock-free after copying the peer table's pointer under
// a mutex once per call; the events of one peer are applied one batch at a
// time (that peer's own mutex); the peer table is copied on change
// (AddPeer, ForgetPeer, Resize), never under a lookup's feet.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "fleet/chunk_filter.h"
#include "fleet/fleet_stats.h"
#include "fleet/peer_rpc.h"
#include "store/object_key.h"

namespace lmcache::fleet {

using ChunkId = std::uint64_t;

enum class DirectoryChange : std::uint8_t {
  kStored,   // the peer's L1 holds these chunks now
  kRemoved,  // it no longer does
  kCleared,  // it dropped everything
};

// What Apply did with a batch.
enum class Applied : std::uint8_t {
  kApplied,
  kNewIncarnation,  // applied, after emptying the peer's filter
  kGap,             // not applied: the peer is stale until Resynced
  kStale,           // not applied: the peer was stale already
  kFull,            // applied in part: the filter filled, and the peer is stale until resized
  kUnknownPeer,     // not applied: no such peer (forgotten)
};

struct PeerPrefix {
  PeerId peer = 0;
  std::size_t chunks = 0;  // the leading chunks of the query it may hold
  bool stale = false;      // named because its filter is not to be trusted
};

// The directory's own figures (LMC_PEER_DIRECTORY_STATS); the feed adds its
// part of P2pDirectoryStats.
LMC_STATS_COUNTED(PeerDirectoryCounters, P2pDirectoryStats, LMC_PEER_DIRECTORY_STATS);

class PeerDirectory {
 public:
  static ChunkId ChunkIdOf(std::string_view model, const store::ChunkHash& hash);
  // The same in two steps, for many chunks of one model and tenant: their
  // part once, then each chunk's. ChunkIdOf(model, hash) is a chunk's id
  // with no cache_salt.
  static ChunkId ModelSeed(std::string_view model, std::string_view cache_salt = {});
  static ChunkId ChunkIdOf(ChunkId model_seed, const store::ChunkHash& hash);

  // A peer joined (or rejoined: its filter starts empty), holding up to
  // `capacity_chunks` chunks; its events are taken from its first batch on.
  void AddPeer(PeerId peer, std::uint64_t capacity_chunks) LMC_EXCLUDES(mu_);
  // Frees the peer's filter; lookups stop naming it at once.
  void ForgetPeer(PeerId peer) LMC_EXCLUDES(mu_);
  // A new, empty filter of `capacity_chunks` for a peer whose filter filled;
  // it stays stale until Resynced.
  void Resize(PeerId peer, std::uint64_t capacity_chunks) LMC_EXCLUDES(mu_);

  // One event of `peer` (`seq` from 1 in each incarnation): `chunks` changed.
  Applied Apply(PeerId peer, std::uint64_t incarnation, std::uint64_t seq, DirectoryChange change,
                std::span<const ChunkId> chunks) LMC_EXCLUDES(mu_);
  void Resynced(PeerId peer, std::uint64_t incarnation, std::uint64_t last_seq) LMC_EXCLUDES(mu_);
  // A resync, as the feed makes it: Empty marks the peer stale and empties
  // its filter; Replay applies the peer's events (a replay socket's, or a
  // listing of what it holds) with no sequence check; Resynced trusts it
  // again from `last_seq + 1` of `incarnation`.
  void Empty(PeerId peer) LMC_EXCLUDES(mu_);
  // Answers how many stored chunks a full filter could not take (the feed
  // lists the peer again into a bigger one).
  std::size_t Replay(PeerId peer, DirectoryChange change, std::span<const ChunkId> chunks)
      LMC_EXCLUDES(mu_);

  // The peers that may hold `chunk` (stale ones always), in the table's order.
  std::vector<PeerId> MayHold(ChunkId chunk) const LMC_EXCLUDES(mu_);
  // For a prompt's chunks in order: each peer that may hold a leading run
  // of them, with its length, longest first (stale peers last, with the
  // whole prompt). Peers whose run is empty are left out.
  std::vector<PeerPrefix> Prefixes(std::span<const ChunkId> chunks) const LMC_EXCLUDES(mu_);

  // The peers whose filters are in step (known and not stale): any other
  // peer, unknown to the directory yet or stale, may hold anything.
  std::vector<PeerId> InStepPeers() const LMC_EXCLUDES(mu_);

  // For each chunk, whether an in-step peer may hold it and is the one of
  // its holders the fleet keeps it on, rather than us (`own_incarnation`,
  // our chunk log's, as the peers know us): the evictor's last-copy bias
  // evicts such a copy of ours first. Of a chunk's holders the keeper is the
  // one whose incarnation ranks highest for that chunk (a rendezvous hash),
  // so two holders that see each other never both take their copy for the
  // spare one, and keepers spread evenly over the fleet.
  std::vector<bool> KeptElsewhere(std::span<const ChunkId> chunks,
                                  std::uint64_t own_incarnation) const LMC_EXCLUDES(mu_);

  // The directory's figures of P2pDirectoryStats (the feed's left 0).
  P2pDirectoryStats Stats() const LMC_EXCLUDES(mu_);

 private:
  struct Peer;
  using Table = std::vector<std::shared_ptr<Peer>>;
  std::shared_ptr<Peer> Find(PeerId peer) const LMC_EXCLUDES(mu_);
  std::shared_ptr<const Table> Snapshot() const LMC_EXCLUDES(mu_);
  // Applies `change` to `p`'s filter (its `mu` held); how many stored
  // chunks a full filter could not take.
  std::size_t ChangeFilter(Peer& p, DirectoryChange change, std::span<const ChunkId> chunks);

  mutable Mutex mu_;  // a leaf
  std::shared_ptr<const Table> table_ LMC_GUARDED_BY(mu_) = std::make_shared<const Table>();
  PeerDirectoryCounters counters_;
};

}  // namespace lmcache::fleet
