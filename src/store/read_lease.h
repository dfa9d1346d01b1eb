// ReadLease: a TTL-bounded, owner-tracked read-lock counter of one object.
//
// Semantics follow the reference's TTLLock (spec 7.1): Lock(n) refreshes the
// expiry to now + ttl on every call, and if the lease had already expired the
// counter restarts at n (stale holders are forgotten); Unlock(n) never goes
// below zero; the lease holds while count > 0 and now < expiry. Beyond the
// reference every lock records its owner (a client instance id), so all locks
// of a departed owner can be released at once. An expired lease only makes the
// object evictable; it does not forbid reading a still-resident object.
//
// Thread-safety: not synchronised; the object table guards each lease with the
// mutex of the shard that holds the object.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace lmcache::store {

using OwnerId = std::uint64_t;

class ReadLease {
 public:
  void Lock(OwnerId owner, std::uint32_t count, TimeMs now, TimeMs ttl_ms);
  // Releases up to `count` locks, the owner's first, then (for locks handed
  // from one client to another, as lookup -> retrieve does) other owners' in
  // the order they were taken. Returns how many were released.
  std::uint32_t Unlock(OwnerId owner, std::uint32_t count, TimeMs now);
  // Releases every lock of `owner`; returns how many.
  std::uint32_t ReleaseOwner(OwnerId owner, TimeMs now);

  bool IsLocked(TimeMs now) const { return count_ > 0 && now < expires_ms_; }
  std::uint32_t count(TimeMs now) const { return IsLocked(now) ? count_ : 0; }
  std::uint32_t OwnerCount(OwnerId owner, TimeMs now) const;
  TimeMs expires_ms() const { return expires_ms_; }
  // Owners that hold at least one live lock.
  std::vector<OwnerId> Owners(TimeMs now) const;

 private:
  void ForgetIfExpired(TimeMs now);

  std::uint32_t count_ = 0;
  TimeMs expires_ms_ = 0;
  std::vector<std::pair<OwnerId, std::uint32_t>> owners_;  // few entries: a vector beats a map
};

}  // namespace lmcache::store
