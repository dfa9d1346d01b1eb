#include "tier/l2_index.h"

#include <algorithm>

namespace lmcache::tier {

L2Index::Tenant& L2Index::TenantLocked(std::string_view salt) {
  auto it = tenants_.find(salt);
  if (it == tenants_.end()) it = tenants_.try_emplace(std::string(salt)).first;
  return it->second;
}

void L2Index::ForgetIfIdleLocked(const std::string& salt) {
  auto it = tenants_.find(std::string_view(salt));
  if (it == tenants_.end()) return;
  const Tenant& t = it->second;
  if (t.held_bytes == 0 && t.reserved_bytes == 0 && t.lru.empty()) tenants_.erase(it);
}

void L2Index::InsertLocked(const store::ObjectKey& key, std::uint64_t bytes) {
  lru_.push_front(key);
  Tenant& tenant = TenantLocked(key.cache_salt);
  tenant.lru.push_front(lru_.begin());
  tenant.held_bytes += bytes;
  entries_.emplace(key, Entry{bytes, 0, lru_.begin(), &tenant, tenant.lru.begin()});
  held_bytes_ += bytes;
}

L2Index::Lru::iterator L2Index::RemoveLocked(Entries::iterator entry) {
  Entry& e = entry->second;
  held_bytes_ -= e.bytes;
  e.tenant->held_bytes -= e.bytes;
  e.tenant->lru.erase(e.in_tenant);
  const std::string salt = entry->first.cache_salt;
  const Lru::iterator next = lru_.erase(e.lru);
  entries_.erase(entry);
  ForgetIfIdleLocked(salt);
  return next;
}

void L2Index::SetLimits(LimitFn limits) {
  MutexLock lock(&mu_);
  limits_ = std::move(limits);
}

bool L2Index::CanMakeRoomLocked(std::uint64_t wanted) const {
  if (capacity_ == 0) return true;
  if (wanted > capacity_) return false;
  const std::uint64_t used = held_bytes_ + reserved_bytes_;
  if (used + wanted <= capacity_) return true;
  std::uint64_t evictable = 0;
  const std::uint64_t needed = used + wanted - capacity_;
  for (auto it = lru_.rbegin(); it != lru_.rend() && evictable < needed; ++it) {
    const Entry& e = entries_.at(*it);
    if (e.locks == 0) evictable += e.bytes;
  }
  return evictable >= needed;
}

bool L2Index::MakeRoomLocked(std::uint64_t wanted, const EvictFn& evict) {
  // Can the unlocked objects free enough? Look before evicting anything.
  if (!CanMakeRoomLocked(wanted)) return false;
  if (capacity_ == 0) return true;
  const std::uint64_t used = held_bytes_ + reserved_bytes_;
  if (used + wanted <= capacity_) return true;
  const std::uint64_t needed = used + wanted - capacity_;
  std::uint64_t freed = 0;
  for (auto it = lru_.end(); it != lru_.begin() && freed < needed;) {
    --it;
    auto entry = entries_.find(*it);
    if (entry->second.locks > 0) continue;
    const std::uint64_t bytes = entry->second.bytes;
    evict(*it, bytes);
    freed += bytes;
    it = RemoveLocked(entry);
  }
  return true;
}

bool L2Index::MakeTenantRoomLocked(std::string_view salt, std::uint64_t wanted,
                                   const EvictFn& evict) {
  const std::optional<std::uint64_t> limit = limits_ ? limits_(salt) : std::nullopt;
  if (!limit) return true;
  if (wanted > *limit) return false;
  auto found = tenants_.find(salt);
  if (found == tenants_.end()) return true;
  Tenant& tenant = found->second;
  const std::uint64_t used = tenant.held_bytes + tenant.reserved_bytes;
  if (used + wanted <= *limit) return true;
  const std::uint64_t needed = used + wanted - *limit;
  std::uint64_t evictable = 0;
  for (auto it = tenant.lru.rbegin(); it != tenant.lru.rend() && evictable < needed; ++it) {
    const Entry& e = entries_.at(**it);
    if (e.locks == 0) evictable += e.bytes;
  }
  if (evictable < needed) return false;
  std::uint64_t freed = 0;
  // Removing the tenant's last object would forget `tenant`: stop first.
  while (freed < needed) {
    auto it = tenant.lru.rbegin();  // the oldest unlocked: one exists, as counted above
    while (entries_.at(**it).locks > 0) ++it;
    auto entry = entries_.find(**it);
    const std::uint64_t bytes = entry->second.bytes;
    evict(entry->first, bytes);
    freed += bytes;
    const bool last = tenant.lru.size() == 1 && tenant.reserved_bytes == 0;
    RemoveLocked(entry);
    if (last) break;
  }
  return true;
}

L2Index::Reservation L2Index::Reserve(std::string_view salt, std::uint64_t bytes,
                                      const EvictFn& evict) {
  MutexLock lock(&mu_);
  // The capacity first, before the tenant's own objects go: what the tenant
  // frees counts toward the capacity too, so if the tier can make room now
  // it still can after, and nothing is evicted for a store that then fails.
  if (!CanMakeRoomLocked(bytes)) return Reservation::kNoRoom;
  if (!MakeTenantRoomLocked(salt, bytes, evict)) return Reservation::kOverQuota;
  if (!MakeRoomLocked(bytes, evict)) return Reservation::kNoRoom;
  reserved_bytes_ += bytes;
  TenantLocked(salt).reserved_bytes += bytes;
  return Reservation::kReserved;
}

void L2Index::Unreserve(std::string_view salt, std::uint64_t bytes) {
  MutexLock lock(&mu_);
  reserved_bytes_ -= std::min(bytes, reserved_bytes_);
  auto it = tenants_.find(salt);
  if (it == tenants_.end()) return;
  it->second.reserved_bytes -= std::min(bytes, it->second.reserved_bytes);
  ForgetIfIdleLocked(it->first);
}

bool L2Index::Commit(const store::ObjectKey& key, std::uint64_t bytes) {
  MutexLock lock(&mu_);
  reserved_bytes_ -= std::min(bytes, reserved_bytes_);
  Tenant& tenant = TenantLocked(key.cache_salt);
  tenant.reserved_bytes -= std::min(bytes, tenant.reserved_bytes);
  if (entries_.contains(key)) {
    ForgetIfIdleLocked(key.cache_salt);
    return false;
  }
  InsertLocked(key, bytes);
  return true;
}

void L2Index::AddExisting(const store::ObjectKey& key, std::uint64_t bytes) {
  MutexLock lock(&mu_);
  if (entries_.contains(key)) return;
  InsertLocked(key, bytes);
}

void L2Index::TrimToCapacity(const EvictFn& evict) {
  MutexLock lock(&mu_);
  if (capacity_ == 0 || held_bytes_ <= capacity_) return;
  for (auto it = lru_.end(); it != lru_.begin() && held_bytes_ > capacity_;) {
    --it;
    auto entry = entries_.find(*it);
    if (entry->second.locks > 0) continue;
    evict(*it, entry->second.bytes);
    it = RemoveLocked(entry);
  }
}

bool L2Index::Contains(const store::ObjectKey& key) const {
  MutexLock lock(&mu_);
  return entries_.contains(key);
}

std::vector<bool> L2Index::LookupAndLock(std::span<const store::ObjectKey> keys) {
  MutexLock lock(&mu_);
  std::vector<bool> found(keys.size(), false);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find(keys[i]);
    if (it == entries_.end()) continue;
    Entry& e = it->second;
    e.locks += 1;
    lru_.splice(lru_.begin(), lru_, e.lru);
    e.tenant->lru.splice(e.tenant->lru.begin(), e.tenant->lru, e.in_tenant);
    found[i] = true;
  }
  return found;
}

void L2Index::Unlock(std::span<const store::ObjectKey> keys) {
  MutexLock lock(&mu_);
  for (const store::ObjectKey& key : keys) {
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.locks > 0) it->second.locks -= 1;
  }
}

std::optional<std::uint64_t> L2Index::Erase(const store::ObjectKey& key) {
  MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  const std::uint64_t bytes = it->second.bytes;
  RemoveLocked(it);
  return bytes;
}

L2Index::Removal L2Index::Remove(const store::ObjectKey& key, bool force, const EvictFn& remove) {
  MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return Removal::kAbsent;
  if (it->second.locks > 0 && !force) return Removal::kLocked;
  remove(it->first, it->second.bytes);
  RemoveLocked(it);
  return Removal::kRemoved;
}

std::vector<std::pair<store::ObjectKey, std::uint64_t>> L2Index::List(
    const store::ObjectKey* after, std::size_t limit,
    const std::function<bool(const store::ObjectKey&)>& keep) const {
  // One pass under the lock, in memory the page bounds (not the index).
  store::ListingWindow window(after, limit);
  MutexLock lock(&mu_);
  for (const auto& [key, entry] : entries_) {
    if (keep && !keep(key)) continue;
    window.Offer(key, entry.bytes);
  }
  return window.Take();
}

std::optional<std::uint64_t> L2Index::SizeOf(const store::ObjectKey& key) const {
  MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.bytes;
}

std::uint64_t L2Index::objects() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

std::uint64_t L2Index::usage_bytes() const {
  MutexLock lock(&mu_);
  return held_bytes_ + reserved_bytes_;
}

std::uint64_t L2Index::tenant_usage_bytes(std::string_view salt) const {
  MutexLock lock(&mu_);
  auto it = tenants_.find(salt);
  return it == tenants_.end() ? 0 : it->second.held_bytes + it->second.reserved_bytes;
}

}  // namespace lmcache::tier
