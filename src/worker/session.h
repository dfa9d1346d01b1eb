// Sessions: per-request state shared by the scheduler's and the workers'
// calls (spec 5.3), keyed by request_id.
//
// A session holds the lookups of its request, one per tenant (cache salt), so
// two tenants that happen to use one request id never replace or release
// each other's lookup. A lookup records the chunk hashes of the prompt, how
// many leading chunks were hit, and the read lease holding them for the
// workers that will retrieve (docs/threading.md, "Lease rules"). A lookup
// that is replaced after its result was reported keeps its lease consumable
// (workers may still be retrieving from it) until the session ends.
//
// Sessions expire after `idle_ttl` of disuse (the reference: after creation),
// and their memory is capped in bytes as well as in count: past either cap
// the least recently used sessions are dropped first. A dropped, expired or
// ended session's leases are released through the `on_drop` callback, which
// the manager calls outside its own mutex.
//
// Mass expiry is incremental: a burst of a million never-ended requests
// expires one TTL later, and every lookup and `stats` needs the manager's
// mutex. ExpireIdle, Trim and TakeConnection therefore work in steps of at
// most kSessionStep sessions per hold of the mutex (every step O(step), no
// scan of the other sessions), release the step's leases with the mutex
// released, and only then take the next step.
//
// Thread-safety: SessionManager is internally synchronised. A Session is
// shared (shared_ptr) and guarded by its own mutex `mu`. Lock order:
// SessionManager::mu_ is never held while a Session::mu is taken, and the
// manager's callers hold no Session::mu when they call GetOrCreate, Trim,
// Remove or ExpireIdle (on_drop takes the dropped session's mutex).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "lmcache/status.h"
#include "store/object_key.h"
#include "store/owner.h"
#include "tier/prefetcher.h"

namespace lmcache::worker {

struct LookupState {
  std::uint64_t sequence = 0;  // order of lookups in the session (status is reported FIFO)
  std::string connection;      // the client (scheduler) that looked it up
  std::string model_name;
  std::int64_t world_size = 0;
  std::string tenant;      // the session's name for it (TenantOf: salt, then any tags)
  std::string cache_salt;  // of its object keys
  std::string tags;        // of its object keys, canonical
  std::uint32_t layout_namespace = 0;    // of the layout registered for (model, world size)
  std::uint32_t readers = 0;             // read locks per object
  std::vector<store::ChunkHash> hashes;  // every full chunk of the looked-up prompt
  std::size_t hit_chunks = 0;            // leading chunks found and locked on every rank
  // The locks of the hit chunks: the L1 prefix's lease, then a prefetch's.
  std::vector<store::LeaseId> leases;
  // Leases of earlier lookups of this tenant whose results were reported:
  // workers may still consume from them.
  std::vector<store::LeaseId> earlier_leases;
  bool prefetch_pending = false;  // L2 is still loading chunks after the L1 prefix
  tier::PrefetchHandle prefetch_handle = 0;
  bool status_consumed = false;  // query/wait_prefetch_status returned the result
};

// What a session hands back when a lookup is replaced or the session ends:
// leases to release and prefetches to cancel.
struct LookupRelease {
  std::vector<store::LeaseId> leases;
  std::vector<tier::PrefetchHandle> prefetches;
};

class Session {
 public:
  // `total_bytes` is the manager's sum of session bytes (nullptr: none).
  Session(std::uint64_t serial, std::atomic<std::size_t>* total_bytes)
      : serial_(serial), total_bytes_(total_bytes) {}
  Mutex mu;

  // The owner of the session's leases (unique per session object).
  store::Owner owner() const { return store::Owner::Session(serial_); }
  // The lookup of tenant `salt` (TenantOf), or nullptr.
  LookupState* FindLookup(const std::string& salt) LMC_REQUIRES(mu);
  // Starts a new lookup for tenant `salt` (at most `max_tenants` per session).
  // Returns what the caller must release now (a previous lookup whose result
  // nobody read, consumable leases beyond the few kept, a pending prefetch).
  Result<LookupRelease> BeginLookup(const std::string& salt, std::size_t max_tenants)
      LMC_REQUIRES(mu);
  // The lookup whose status is to be reported next (the oldest unreported),
  // or the newest one when all were reported; nullptr when there is none.
  LookupState* StatusLookup() LMC_REQUIRES(mu);
  // Leases a reader of tenant `salt` may consume from, newest first.
  std::vector<store::LeaseId> ConsumableLeases(const std::string& salt) LMC_REQUIRES(mu);
  // Everything the session holds, taken out of it (ending it).
  LookupRelease TakeAll() LMC_REQUIRES(mu);
  // What the lookups made over `connection` hold, taken out of them (it closed).
  LookupRelease TakeConnection(std::string_view connection) LMC_REQUIRES(mu);
  std::vector<LookupState*> Lookups() LMC_REQUIRES(mu);
  // Bytes the session's state takes (the manager's memory cap counts them).
  std::size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // Recomputes bytes() after a change; called by whoever changed it.
  void Account() LMC_REQUIRES(mu);

 private:
  friend class SessionManager;
  const std::uint64_t serial_;
  std::uint64_t next_sequence_ LMC_GUARDED_BY(mu) = 1;
  std::map<std::string, LookupState> lookups_ LMC_GUARDED_BY(mu);  // by cache salt
  std::atomic<std::size_t> bytes_{0};
  std::atomic<std::size_t>* const total_bytes_;
  bool counted_ LMC_GUARDED_BY(mu) = true;  // still part of the manager's sum
};

// Sessions dropped per hold of the manager's mutex (expiry, trimming, a
// closed connection): bounds how long a lookup can wait for it
// (docs/performance.md, "Mass session expiry").
inline constexpr std::size_t kSessionStep = 256;

struct SessionLimits {
  TimeMs idle_ttl_ms = 600'000;
  std::size_t max_sessions = 1'000'000;
  std::size_t max_bytes = 256u << 20;
  std::size_t max_tenants_per_session = 16;
};

class SessionManager {
 public:
  using DropFn = std::function<void(Session&)>;
  SessionManager(const Clock* clock, const SessionLimits& limits, DropFn on_drop);

  // The session of `request_id`, created when missing; refreshes its last
  // use. Drops least recently used sessions first when a cap is reached.
  std::shared_ptr<Session> GetOrCreate(const std::string& request_id) LMC_EXCLUDES(mu_);
  // The session if it exists (refreshing its last use), else nullptr.
  std::shared_ptr<Session> Find(const std::string& request_id) LMC_EXCLUDES(mu_);
  // Removes the session (on_drop runs); false if none.
  bool Remove(const std::string& request_id) LMC_EXCLUDES(mu_);
  // Drops sessions idle for the TTL or longer, kSessionStep at a time;
  // returns how many.
  std::size_t ExpireIdle() LMC_EXCLUDES(mu_);
  // Drops least recently used sessions while over the byte cap, in steps.
  std::size_t Trim() LMC_EXCLUDES(mu_);
  // Remembers that `connection` looked `request_id` up (for TakeConnection).
  void NoteConnection(const std::string& request_id, std::string_view connection) LMC_EXCLUDES(mu_);
  // Up to kSessionStep of the sessions `connection` looked up, each
  // forgetting the connection; call again until it returns none.
  std::vector<std::shared_ptr<Session>> TakeConnection(std::string_view connection)
      LMC_EXCLUDES(mu_);
  std::size_t size() const LMC_EXCLUDES(mu_);
  std::size_t bytes() const { return total_bytes_.load(std::memory_order_relaxed); }
  std::uint64_t dropped_for_memory() const { return dropped_for_memory_.load(); }
  const SessionLimits& limits() const { return limits_; }

 private:
  struct Entry {
    std::shared_ptr<Session> session;
    TimeMs last_used_ms = 0;
    std::list<std::string>::iterator lru;  // position in lru_
    std::vector<std::string> connections;  // that looked it up
  };
  // Moves the entry to the most recently used end.
  void UseLocked(Entry& entry, TimeMs now) LMC_REQUIRES(mu_);
  void DropLocked(const std::string& request_id, std::vector<std::shared_ptr<Session>>* dropped)
      LMC_REQUIRES(mu_);
  void RunDrops(std::vector<std::shared_ptr<Session>>& dropped) LMC_EXCLUDES(mu_);
  // Drops, one step at a time, the least recently used session while
  // `drop_front(dropped so far in this step)` says so (called with mu_
  // held); returns how many went.
  template <typename DropFront>
  std::size_t DropFrontInSteps(DropFront drop_front) LMC_EXCLUDES(mu_);
  // Between two steps: lets the threads waiting for mu_ take it first
  // (for at most a millisecond).
  void LetWaitersIn() const LMC_EXCLUDES(mu_);

  const Clock* const clock_;
  const SessionLimits limits_;
  const DropFn on_drop_;
  std::atomic<std::uint64_t> next_serial_{1};
  std::atomic<std::size_t> total_bytes_{0};
  std::atomic<std::uint64_t> dropped_for_memory_{0};
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> sessions_ LMC_GUARDED_BY(mu_);
  std::list<std::string> lru_ LMC_GUARDED_BY(mu_);  // front = least recently used
  // connection -> request ids it looked up (a closed connection's lookups are
  // released). A set: one client may hold a million of them, and dropping one
  // must not scan the others.
  std::unordered_map<std::string, std::unordered_set<std::string>> by_connection_
      LMC_GUARDED_BY(mu_);
};

}  // namespace lmcache::worker
