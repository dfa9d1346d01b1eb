#include "store/read_locks.h"

#include <algorithm>

#include "common/check.h"

namespace lmcache::store {

void ReadLocks::Prune(TimeMs now) {
  std::erase_if(holds_, [now](const Hold& hold) { return !hold.Live(now); });
}

ReadLocks::Hold* ReadLocks::Find(LeaseId lease) {
  for (Hold& hold : holds_) {
    if (hold.lease == lease) return &hold;
  }
  return nullptr;
}

void ReadLocks::Lock(LeaseId lease, Owner owner, std::uint32_t count, TimeMs now,
                     TimeMs ttl_ms) {
  LMC_CHECK(lease != kNoLease && count > 0);
  Prune(now);
  if (Hold* hold = Find(lease)) {
    LMC_CHECK(hold->owner == owner);
    hold->count = std::min(hold->count + count, kMaxReadLockCount);
    hold->expires_ms = now + ttl_ms;
    return;
  }
  holds_.push_back({lease, owner, std::min(count, kMaxReadLockCount), now + ttl_ms});
}

std::uint32_t ReadLocks::Unlock(LeaseId lease, std::uint32_t count, TimeMs now) {
  Hold* hold = Find(lease);
  std::uint32_t released = 0;
  if (hold != nullptr && hold->Live(now)) {
    released = std::min(hold->count, count);
    hold->count -= released;
  }
  Prune(now);
  return released;
}

bool ReadLocks::Transfer(LeaseId from, LeaseId to, Owner to_owner, TimeMs now, TimeMs ttl_ms) {
  Hold* source = Find(from);
  if (source == nullptr || !source->Live(now)) return false;
  source->count -= 1;
  Lock(to, to_owner, 1, now, ttl_ms);  // prunes the source if it reached zero
  return true;
}

std::uint32_t ReadLocks::ReleaseOwner(Owner owner, TimeMs now) {
  std::uint32_t released = 0;
  for (Hold& hold : holds_) {
    if (hold.owner == owner && hold.Live(now)) {
      released += hold.count;
      hold.count = 0;
    }
  }
  Prune(now);
  return released;
}

bool ReadLocks::IsLocked(TimeMs now) const {
  return std::any_of(holds_.begin(), holds_.end(),
                     [now](const Hold& hold) { return hold.Live(now); });
}

std::uint32_t ReadLocks::count(TimeMs now) const {
  std::uint32_t total = 0;
  for (const Hold& hold : holds_) {
    if (hold.Live(now)) total += hold.count;
  }
  return total;
}

std::uint32_t ReadLocks::LeaseCount(LeaseId lease, TimeMs now) const {
  for (const Hold& hold : holds_) {
    if (hold.lease == lease) return hold.Live(now) ? hold.count : 0;
  }
  return 0;
}

std::size_t ReadLocks::holds(TimeMs now) const {
  return static_cast<std::size_t>(std::count_if(
      holds_.begin(), holds_.end(), [now](const Hold& hold) { return hold.Live(now); }));
}

}  // namespace lmcache::store
