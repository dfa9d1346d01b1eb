// P2pAdapter: the peers of this server as a source of the L2 cascade (issue
// 42, section 3): on an L1 miss the prefetch path asks peers which keys they
// hold in their L1, and loads each found chunk from the first peer in the
// membership's order that holds it, straight into the L1 slot the prefetch
// reserved, over the UCX data channel (fleet/ucx_channel.h). What a peer
// served is admitted to our L1 as an ordinary object, with its KV event, so
// its next touch stays local; with --p2p-keep-loaded false it is served once
// (KeepsLoadedObjects): read by the request that asked for it, then freed.
//
// Which peers (Plan): every ready peer, for every key (broadcast, the
// reference's way, when PeerAccess::directory() is null), or, directed
// (issue 43), each key at one peer in step that the directory names (the
// one that may hold the longest run of the lookup's chunks first), a key
// no peer in step names at every ready peer not in step (stale or not yet
// met: it may hold anything), and a key nobody names nowhere. What each
// lookup asked and found is counted (PeerAccess::lookup_counters).
//
// A lookup is the reference's three calls (p2p-spec.md section 4), made to
// the planned peers at once over the fleet endpoint (fleet/peer_rpc.h):
// p2p_lookup_and_lock, then p2p_query_lookup_results until the task is
// answered, each peer's answer checked (one address per key, the size the
// lookup asked for). A key found at several peers is kept at the first and
// unlocked at the others at once; Unlock sends p2p_unlock_task (ours: that
// task's locks only) for the locks the plan did not load from or has
// loaded, and every read names the task whose lock it goes through. A task given up on after
// its id came back (its answer past our deadline, unusable, or never
// ready) is ended at its owner with p2p_end_task (ours), so its locks do
// not stand until the owner's read TTL. Nothing here blocks: the
// calls complete on the peer RPC's thread and the reads on the channel's,
// and a peer that does not answer by --p2p-lookup-timeout (or whose reads
// do not land by --p2p-load-timeout) counts as holding nothing; the
// membership's circuit breaker keeps an unreachable peer out of the next
// lookups.
//
// The layout a lookup sends is one uint8 tensor of the object's size: our
// owners check only the size (server/p2p_ops.cc), and a key also carries our
// layout namespace and tags (protocol/p2p_codec.h), so an object of another
// layout is a miss, never the wrong bytes. Stores never come here
// (TakesStores false): a peer's L1 is its own.
//
// Thread-safety: every method from any thread; `mu_` guards the locks held
// at peers. Completions run on the RPC and channel threads and take `mu_`
// only briefly.
#pragma once

#include <list>
#include <optional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "fleet/fleet_link.h"
#include "tier/l2_adapter.h"

namespace lmcache::tier {

class P2pAdapter final : public L2Adapter {
 public:
  // `peers` must outlive the adapter (and every completion of its calls).
  explicit P2pAdapter(const fleet::PeerAccess* peers);
  ~P2pAdapter() override;

  Status AttachMemory(std::span<std::byte> pool) override;
  // Never called (TakesStores is false); refuses every object if it is.
  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override;
  // Peers are asked only through SubmitLookup (they need the objects'
  // size); this answers that nothing is held.
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override;
  void SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes,
                    LookupDone done) override;
  void Unlock(std::span<const store::ObjectKey> keys) override;
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override;
  L2AdapterStats Stats() const override;
  bool CompletesAsynchronously() const override { return true; }
  bool TakesStores() const override { return false; }
  bool KeepsLoadedObjects() const override { return peers_->keep_loaded(); }

  // One lock we hold on a key at a peer, and where the key lies there.
  // Locks on one key are interchangeable to the controller (it unlocks a
  // key, not a lookup), but not across peers: a lock being read through
  // must not be the one an unlock ends, or the peer could evict the object
  // and reuse its memory under the read.
  struct Location {
    std::uint64_t id = 0;  // ours, to find it again when a read ends
    fleet::PeerId rpc = 0;
    std::int64_t task = 0;  // the peer's lookup task that holds the lock
    fleet::PeerHandle channel = 0;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
    std::uint32_t reading = 0;          // reads through it now
    std::uint32_t release_after_read = 0;  // unlocks waiting for those reads
  };

 private:
  struct Lookup;
  struct Shared;

  // Which keys of `lookup` each ready peer is asked for: all of them
  // (broadcast), or those the directory names it for (directed).
  void Plan(Lookup& lookup) const;
  // Counts what `lookup` asked and found (`held`: per key).
  void CountOutcome(const Lookup& lookup, const std::vector<bool>& held) const;
  // Every peer of `lookup` answered (or failed): records the locations,
  // unlocks the duplicates and answers.
  void Resolve(Lookup& lookup) LMC_EXCLUDES(mu_);
  // p2p_unlock_task (ours): `peer` releases the locks its task `task` holds
  // on `keys`. By task, not by key (p2p_unlock_objects): a peer that
  // restarted since the lookup has no such task and releases nothing, where
  // by key it would release a later lookup's lock of ours on that key.
  void SendUnlock(fleet::PeerId peer, std::int64_t task, std::vector<store::ObjectKey> keys);
  // p2p_end_task (ours): `peer` ends `task`, which we will not use, with its locks.
  void SendEndTask(fleet::PeerId peer, std::int64_t task);
  // Sends `op` with its `frames` to `peer`, to release what a lookup of
  // ours holds there; its answer changes nothing.
  void SendRelease(fleet::PeerId peer, Op op, std::vector<std::string> frames);

  const fleet::PeerAccess* const peers_;
  std::span<std::byte> pool_;
  // Counters the completions reach, alive as long as a call of ours may be.
  std::shared_ptr<Shared> shared_;

  mutable Mutex mu_;
  // Per key, one location per lock a lookup of ours took. Unlock ends one
  // that no read goes through (or, when every one is being read, the first
  // once its reads end); a load reads through the one with the fewest reads.
  std::unordered_map<store::ObjectKey, std::list<Location>, store::ObjectKeyHash> locks_
      LMC_GUARDED_BY(mu_);
  std::uint64_t locked_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t next_location_ LMC_GUARDED_BY(mu_) = 1;

  // A read through (key, location id) ended: its unlock is sent if one waited.
  void ReadEnded(const store::ObjectKey& key, std::uint64_t location) LMC_EXCLUDES(mu_);
  // Ends one lock on `key` (see locks_); where to unlock it, if now.
  std::optional<Location> EndOneLock(const store::ObjectKey& key) LMC_REQUIRES(mu_);
};

}  // namespace lmcache::tier
