// PeerTasks: the owner side of the reference's P2P lookups (p2p-spec.md
// sections 5.1 to 5.3), with what section 5.4 says the reference lacks.
//
// A peer's p2p_lookup_and_lock becomes a task owned by (that peer, that task
// id). The task read-locks every distinct key that is resident in L1 and
// whose stored size is the size the peer's layout says (a different size is
// a miss, never the wrong bytes), under one lease of Owner::Peer(serial).
// p2p_query_lookup_results answers the task's addresses once, to the peer
// that made it; p2p_unlock_objects releases, for each key, one lock that
// peer holds (its oldest answered task's, else its oldest task's: a
// requester unlocks what a query told it, and a task never queried is the
// reaper's), so a duplicate or late unlock releases nothing else and never
// another reader's lock. Our requesters unlock by task (p2p_unlock_task):
// task ids start at a base drawn per boot, so an unlock meant for this
// owner's previous life names no task here and releases nothing, where a
// by-key unlock would release the same requester's later lock on that key.
// The data channel serves a read only for an object its task holds locked
// now (Holds). A task not queried within
// the query timeout is reaped with its locks; the read TTL ends the rest.
// Each peer is bounded in tasks and in locked bytes: past a bound its keys
// are misses, counted, and its oldest task holding no lock gives way to the
// new one, so a peer that never queries cannot grow the table. Only L1 is consulted, never an L2 tier.
//
// Thread-safety: every method may be called from any thread; one mutex
// guards the tasks, and the object table is called under it (the table
// never calls back).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "fleet/fleet_stats.h"
#include "protocol/p2p_codec.h"
#include "store/object_key.h"
#include "store/object_table.h"

namespace lmcache::fleet {

struct PeerTaskConfig {
  // A task its peer never queried within this is reaped with its locks
  // (--p2p-lookup-timeout; the reference's requester gives up after it).
  TimeMs query_timeout_ms = 30'000;
  // The store's read TTL: by then the store has ended a task's lease itself.
  TimeMs read_ttl_ms = 300'000;
  std::size_t max_tasks_per_peer = 256;
  std::uint64_t max_locked_bytes_per_peer = std::uint64_t{16} << 30;
  // Across every peer (issue 62, section 8): the bytes peers may hold
  // locked together (--p2p-max-locked-fraction of the pool), and the tasks
  // kept at once (a connection that did not prove the key is a peer of its
  // own, so per-peer bounds alone do not bound the table).
  std::uint64_t max_locked_bytes_total = ~std::uint64_t{0};
  std::size_t max_tasks_total = std::size_t{1} << 16;
  // The first task id (the reference counts from 0; a base drawn per boot
  // makes an id held across an owner's restart name no task of the new one).
  std::int64_t first_task_id = 0;
};

// One key a peer asks for, and the bytes its layout says the object has (0:
// not checked; kUnservable: no object can match, the key is a miss and the
// table is not asked).
inline constexpr std::uint64_t kUnservable = ~std::uint64_t{0};
struct RequestedObject {
  store::ObjectKey key;
  std::uint64_t expected_bytes = 0;
};

class PeerTasks {
 public:
  // `table` and `clock` must outlive this.
  PeerTasks(store::ObjectTable* table, const Clock* clock, PeerTaskConfig config);
  ~PeerTasks();  // releases every lock still held
  PeerTasks(const PeerTasks&) = delete;
  PeerTasks& operator=(const PeerTasks&) = delete;

  // p2p_lookup_and_lock: locks what is there and answers the task id. A
  // peer that has not proved the fleet key (`trusted` false) gets a task
  // whose every key is a miss: the reference's requester then ends its
  // lookup at its first query instead of polling until its deadline.
  std::int64_t Lookup(const std::string& peer, std::span<const RequestedObject> keys,
                      bool trusted = true) LMC_EXCLUDES(mu_);
  // p2p_query_lookup_results: one address per key of the lookup, in its
  // order (a miss is {-1, 0}), once; nullopt for a task this peer does not
  // have (never made, another peer's, answered already, or reaped).
  std::optional<std::vector<protocol::P2pAddress>> Results(const std::string& peer,
                                                           std::int64_t task)
      LMC_EXCLUDES(mu_);
  // p2p_unlock_objects: for each key, one lock `peer` holds on it (its oldest
  // task's) is released; returns how many were.
  std::size_t Unlock(const std::string& peer, std::span<const store::ObjectKey> keys)
      LMC_EXCLUDES(mu_);
  // p2p_unlock_task (ours): for each key, the lock task `task` of `peer`
  // holds on it is released; returns how many were. A key the task does
  // not hold (unlocked already, never locked, a task of another life)
  // releases nothing.
  std::size_t UnlockTask(const std::string& peer, std::int64_t task,
                         std::span<const store::ObjectKey> keys) LMC_EXCLUDES(mu_);
  // Whether task `task` (of any peer: ids are unique) holds locked now the
  // object at exactly [offset, offset + size) of the pool, its lease not
  // past the read TTL: the only reads the data channel serves.
  bool Holds(std::int64_t task, std::uint64_t offset, std::uint64_t size) const LMC_EXCLUDES(mu_);
  // p2p_end_task: ends `peer`'s task `task` with its locks (its requester
  // will not use it); false when `peer` has no such task.
  bool EndOne(const std::string& peer, std::int64_t task) LMC_EXCLUDES(mu_);
  // Ends every task of `peer` with its locks (the peer went, or restarted).
  // Counted as an ended life, or as a closed connection's.
  enum class DropReason { kLifeEnded, kConnectionClosed };
  std::size_t DropPeer(const std::string& peer, DropReason why = DropReason::kLifeEnded)
      LMC_EXCLUDES(mu_);
  // Moves every task of `from` to `to` (a connection that said which
  // requester it speaks for: what it took before is that requester's).
  // Returns the tasks moved.
  std::size_t Adopt(const std::string& from, const std::string& to) LMC_EXCLUDES(mu_);
  // Reaps tasks past their query timeout (with their locks) and forgets those
  // past the read TTL; returns the tasks ended.
  std::size_t Reap() LMC_EXCLUDES(mu_);

  PeerTaskStats Stats() const LMC_EXCLUDES(mu_);

 private:
  struct Range {
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
  };
  struct Task {
    std::int64_t id = 0;
    store::LeaseId lease = store::kNoLease;
    TimeMs created_ms = 0;
    bool queried = false;
    std::size_t key_count = 0;
    // Until queried; none kept for a task that locked nothing (all misses,
    // as an untrusted caller's always are): Results makes them from key_count.
    std::vector<protocol::P2pAddress> addresses;
    // The keys this task holds a lock on, with where their objects lie.
    std::unordered_map<store::ObjectKey, Range, store::ObjectKeyHash> locked;
    // The same objects by offset (distinct keys lie at distinct offsets).
    std::unordered_map<std::uint64_t, std::uint64_t> sizes_by_offset;
    std::uint64_t locked_bytes = 0;
  };
  struct Peer {
    std::deque<Task> tasks;  // oldest first
    std::uint64_t locked_bytes = 0;
  };

  void LockKeys(Peer& peer, Task& task, std::span<const RequestedObject> keys) LMC_REQUIRES(mu_);
  // Releases the task's locks and removes it from `peer`.
  void EndTask(Peer& peer, std::deque<Task>::iterator task) LMC_REQUIRES(mu_);
  // Releases the task's lock on `key` (which it holds); a queried task left
  // with no lock ends.
  void ReleaseKey(Peer& peer, std::deque<Task>::iterator task, const store::ObjectKey& key)
      LMC_REQUIRES(mu_);
  static std::deque<Task>::iterator FindTask(Peer& peer, std::int64_t id);
  std::size_t EndTasksIf(Peer& peer, TimeMs now) LMC_REQUIRES(mu_);

  store::ObjectTable* const table_;
  const Clock* const clock_;
  const PeerTaskConfig config_;
  mutable Mutex mu_;
  std::map<std::string, Peer, std::less<>> peers_ LMC_GUARDED_BY(mu_);
  // Which peer each task is of, for the data channel's checks (Holds).
  std::unordered_map<std::int64_t, std::string> peer_of_task_ LMC_GUARDED_BY(mu_);
  std::int64_t next_task_id_ LMC_GUARDED_BY(mu_);
  std::uint64_t next_serial_ LMC_GUARDED_BY(mu_) = 1;  // of the tasks' lease owners
  std::size_t tasks_ LMC_GUARDED_BY(mu_) = 0;            // of every peer
  std::uint64_t locked_bytes_ LMC_GUARDED_BY(mu_) = 0;   // of every peer
  PeerTaskCounters counters_;
};

}  // namespace lmcache::fleet
