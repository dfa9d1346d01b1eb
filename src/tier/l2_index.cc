#include "tier/l2_index.h"

namespace lmcache::tier {

bool L2Index::MakeRoomLocked(std::uint64_t wanted, const EvictFn& evict) {
  if (capacity_ == 0) return true;
  if (wanted > capacity_) return false;
  const std::uint64_t used = held_bytes_ + reserved_bytes_;
  if (used + wanted <= capacity_) return true;
  // Can the unlocked objects free enough? Look before evicting anything.
  std::uint64_t evictable = 0;
  const std::uint64_t needed = used + wanted - capacity_;
  for (auto it = lru_.rbegin(); it != lru_.rend() && evictable < needed; ++it) {
    const Entry& e = entries_.at(*it);
    if (e.locks == 0) evictable += e.bytes;
  }
  if (evictable < needed) return false;
  std::uint64_t freed = 0;
  for (auto it = lru_.end(); it != lru_.begin() && freed < needed;) {
    --it;
    auto entry = entries_.find(*it);
    if (entry->second.locks > 0) continue;
    const std::uint64_t bytes = entry->second.bytes;
    evict(*it, bytes);
    freed += bytes;
    held_bytes_ -= bytes;
    entries_.erase(entry);
    it = lru_.erase(it);
  }
  return true;
}

bool L2Index::Reserve(std::uint64_t bytes, const EvictFn& evict) {
  MutexLock lock(&mu_);
  if (!MakeRoomLocked(bytes, evict)) return false;
  reserved_bytes_ += bytes;
  return true;
}

void L2Index::Unreserve(std::uint64_t bytes) {
  MutexLock lock(&mu_);
  reserved_bytes_ -= std::min(bytes, reserved_bytes_);
}

bool L2Index::Commit(const store::ObjectKey& key, std::uint64_t bytes) {
  MutexLock lock(&mu_);
  reserved_bytes_ -= std::min(bytes, reserved_bytes_);
  if (entries_.contains(key)) return false;
  lru_.push_front(key);
  entries_.emplace(key, Entry{bytes, 0, lru_.begin()});
  held_bytes_ += bytes;
  return true;
}

void L2Index::AddExisting(const store::ObjectKey& key, std::uint64_t bytes) {
  MutexLock lock(&mu_);
  if (entries_.contains(key)) return;
  lru_.push_front(key);
  entries_.emplace(key, Entry{bytes, 0, lru_.begin()});
  held_bytes_ += bytes;
}

void L2Index::TrimToCapacity(const EvictFn& evict) {
  MutexLock lock(&mu_);
  if (capacity_ == 0 || held_bytes_ <= capacity_) return;
  for (auto it = lru_.end(); it != lru_.begin() && held_bytes_ > capacity_;) {
    --it;
    auto entry = entries_.find(*it);
    if (entry->second.locks > 0) continue;
    evict(*it, entry->second.bytes);
    held_bytes_ -= entry->second.bytes;
    entries_.erase(entry);
    it = lru_.erase(it);
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
    it->second.locks += 1;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
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
  held_bytes_ -= bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
  return bytes;
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

}  // namespace lmcache::tier
