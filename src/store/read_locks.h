// ReadLocks: the read leases held on one L1 object.
//
// Each hold belongs to exactly one lease (and through it to one owner) and has
// its own count and expiry. A release names its lease and touches nothing
// else: no reader can lose its lock to another reader's release. An object is
// read-locked while any hold has a count and has not expired; an expired hold
// only stops protecting the object (it becomes evictable), it is never handed
// to someone else. Transfer() moves one lock from one lease to another (a
// worker consuming its share of a lookup's locks), so the object stays locked
// throughout. Counts per lease are capped at kMaxReadLockCount.
//
// Thread-safety: not synchronised; the object table guards each object's
// ReadLocks with the mutex of the shard that holds the object.
#pragma once

#include <cstdint>
#include <vector>

#include "common/clock.h"
#include "store/owner.h"

namespace lmcache::store {

inline constexpr std::uint32_t kMaxReadLockCount = 128;

class ReadLocks {
 public:
  // Adds `count` locks to `lease` (held by `owner`) and restarts its expiry.
  void Lock(LeaseId lease, Owner owner, std::uint32_t count, TimeMs now, TimeMs ttl_ms);
  // Releases up to `count` live locks of `lease`; returns how many.
  std::uint32_t Unlock(LeaseId lease, std::uint32_t count, TimeMs now);
  // Moves one live lock of `from` to `to` (held by `to_owner`, expiring at
  // now + ttl). False, with nothing changed, when `from` holds none.
  bool Transfer(LeaseId from, LeaseId to, Owner to_owner, TimeMs now, TimeMs ttl_ms);
  // Releases every lock of every lease of `owner`; returns how many.
  std::uint32_t ReleaseOwner(Owner owner, TimeMs now);

  bool IsLocked(TimeMs now) const;
  // Live locks of all leases.
  std::uint32_t count(TimeMs now) const;
  // Live locks of one lease.
  std::uint32_t LeaseCount(LeaseId lease, TimeMs now) const;
  // Live holds (leases with at least one live lock).
  std::size_t holds(TimeMs now) const;

 private:
  struct Hold {
    LeaseId lease = kNoLease;
    Owner owner;
    std::uint32_t count = 0;
    TimeMs expires_ms = 0;
    bool Live(TimeMs now) const { return count > 0 && now < expires_ms; }
  };
  // Drops holds that expired or reached zero.
  void Prune(TimeMs now);
  Hold* Find(LeaseId lease);

  std::vector<Hold> holds_;  // few entries: a vector beats a map
};

}  // namespace lmcache::store
