// LeaseRegistry: every live lease of the object table, by id and by owner.
//
// A lease is one acquisition: the read locks a lookup or a prepare_retrieve
// took, or the copies a writer staged. The registry remembers which objects
// each lease covers, so a lease can be released by its handle alone, and an
// owner's leases can be found without scanning the table (unregister, a
// departed worker). It holds bookkeeping only: the locks themselves live with
// the objects (ReadLocks, staged entries), under the shard mutexes.
//
// Thread-safety: internally synchronised by one mutex, a leaf in the lock
// order: callers take what they need out of the registry before they lock
// any shard, and never call into it while holding a shard mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "store/object_key.h"
#include "store/owner.h"

namespace lmcache::store {

enum class LeaseKind : std::uint8_t { kRead, kWrite };

struct LeaseRecord {
  Owner owner;
  LeaseKind kind = LeaseKind::kRead;
  std::vector<ObjectKey> keys;  // the objects the lease covers
  TimeMs expires_ms = 0;        // after it the record is only memory: its locks expired too
};

struct LeaseCounts {
  std::uint64_t read = 0;
  std::uint64_t write = 0;
};

class LeaseRegistry {
 public:
  // A fresh id (never kNoLease, never reused).
  LeaseId NewId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  void Add(LeaseId lease, LeaseRecord record) LMC_EXCLUDES(mu_);
  // Adds `record`'s keys to the lease (created from `record` if missing).
  void Append(LeaseId lease, LeaseRecord record) LMC_EXCLUDES(mu_);
  // Removes and returns the record, if it exists and is of `kind`.
  std::optional<LeaseRecord> Take(LeaseId lease, LeaseKind kind) LMC_EXCLUDES(mu_);
  // A copy of the record's keys and owner, the record staying.
  std::optional<LeaseRecord> Get(LeaseId lease) const LMC_EXCLUDES(mu_);
  // Removes and returns every record of `owner`.
  std::vector<std::pair<LeaseId, LeaseRecord>> TakeOwner(const Owner& owner) LMC_EXCLUDES(mu_);
  // Removes and returns the records that expired by `now`.
  std::vector<std::pair<LeaseId, LeaseRecord>> TakeExpired(TimeMs now) LMC_EXCLUDES(mu_);
  LeaseCounts Counts() const LMC_EXCLUDES(mu_);

 private:
  void IndexOwnerLocked(const Owner& owner, LeaseId lease) LMC_REQUIRES(mu_);
  void UnindexOwnerLocked(const Owner& owner, LeaseId lease) LMC_REQUIRES(mu_);

  std::atomic<LeaseId> next_id_{1};
  mutable Mutex mu_;
  std::unordered_map<LeaseId, LeaseRecord> leases_ LMC_GUARDED_BY(mu_);
  std::unordered_map<Owner, std::vector<LeaseId>, OwnerHash> by_owner_ LMC_GUARDED_BY(mu_);
};

}  // namespace lmcache::store
