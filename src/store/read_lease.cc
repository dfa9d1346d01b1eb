#include "store/read_lease.h"

#include <algorithm>

namespace lmcache::store {

void ReadLease::ForgetIfExpired(TimeMs now) {
  if (now >= expires_ms_) {
    count_ = 0;
    owners_.clear();
  }
}

void ReadLease::Lock(OwnerId owner, std::uint32_t count, TimeMs now, TimeMs ttl_ms) {
  ForgetIfExpired(now);
  count_ += count;
  expires_ms_ = now + ttl_ms;
  for (auto& [id, n] : owners_) {
    if (id == owner) {
      n += count;
      return;
    }
  }
  owners_.emplace_back(owner, count);
}

std::uint32_t ReadLease::Unlock(OwnerId owner, std::uint32_t count, TimeMs now) {
  ForgetIfExpired(now);
  std::uint32_t released = 0;
  auto take = [&](std::pair<OwnerId, std::uint32_t>& entry) {
    const std::uint32_t n = std::min(entry.second, count - released);
    entry.second -= n;
    released += n;
  };
  for (auto& entry : owners_) {
    if (entry.first == owner) take(entry);
  }
  for (auto& entry : owners_) {
    if (released == count) break;
    take(entry);
  }
  std::erase_if(owners_, [](const auto& entry) { return entry.second == 0; });
  count_ -= released;
  return released;
}

std::uint32_t ReadLease::ReleaseOwner(OwnerId owner, TimeMs now) {
  return Unlock(owner, OwnerCount(owner, now), now);
}

std::uint32_t ReadLease::OwnerCount(OwnerId owner, TimeMs now) const {
  if (!IsLocked(now)) return 0;
  for (const auto& [id, n] : owners_) {
    if (id == owner) return n;
  }
  return 0;
}

std::vector<OwnerId> ReadLease::Owners(TimeMs now) const {
  std::vector<OwnerId> out;
  if (!IsLocked(now)) return out;
  for (const auto& entry : owners_) out.push_back(entry.first);
  return out;
}

}  // namespace lmcache::store
