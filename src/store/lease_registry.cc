#include "store/lease_registry.h"

#include <algorithm>

#include "common/check.h"

namespace lmcache::store {

void LeaseRegistry::IndexOwnerLocked(const Owner& owner, LeaseId lease) {
  by_owner_[owner].push_back(lease);
}

void LeaseRegistry::UnindexOwnerLocked(const Owner& owner, LeaseId lease) {
  auto it = by_owner_.find(owner);
  if (it == by_owner_.end()) return;
  std::erase(it->second, lease);
  if (it->second.empty()) by_owner_.erase(it);
}

void LeaseRegistry::Add(LeaseId lease, LeaseRecord record) {
  LMC_CHECK(lease != kNoLease);
  MutexLock lock(&mu_);
  const Owner owner = record.owner;
  const bool inserted = leases_.emplace(lease, std::move(record)).second;
  LMC_CHECK(inserted);
  IndexOwnerLocked(owner, lease);
}

void LeaseRegistry::Append(LeaseId lease, LeaseRecord record) {
  LMC_CHECK(lease != kNoLease);
  MutexLock lock(&mu_);
  auto it = leases_.find(lease);
  if (it == leases_.end()) {
    const Owner owner = record.owner;
    leases_.emplace(lease, std::move(record));
    IndexOwnerLocked(owner, lease);
    return;
  }
  LMC_CHECK(it->second.owner == record.owner && it->second.kind == record.kind);
  it->second.keys.insert(it->second.keys.end(), record.keys.begin(), record.keys.end());
  it->second.expires_ms = std::max(it->second.expires_ms, record.expires_ms);
}

std::optional<LeaseRecord> LeaseRegistry::Take(LeaseId lease, LeaseKind kind) {
  MutexLock lock(&mu_);
  auto it = leases_.find(lease);
  if (it == leases_.end() || it->second.kind != kind) return std::nullopt;
  LeaseRecord record = std::move(it->second);
  leases_.erase(it);
  UnindexOwnerLocked(record.owner, lease);
  return record;
}

std::optional<LeaseRecord> LeaseRegistry::Get(LeaseId lease) const {
  MutexLock lock(&mu_);
  auto it = leases_.find(lease);
  if (it == leases_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<LeaseId, LeaseRecord>> LeaseRegistry::TakeOwner(const Owner& owner) {
  MutexLock lock(&mu_);
  std::vector<std::pair<LeaseId, LeaseRecord>> out;
  auto it = by_owner_.find(owner);
  if (it == by_owner_.end()) return out;
  for (const LeaseId lease : it->second) {
    auto record = leases_.find(lease);
    if (record == leases_.end()) continue;
    out.emplace_back(lease, std::move(record->second));
    leases_.erase(record);
  }
  by_owner_.erase(it);
  return out;
}

std::vector<std::pair<LeaseId, LeaseRecord>> LeaseRegistry::TakeExpired(TimeMs now) {
  MutexLock lock(&mu_);
  std::vector<std::pair<LeaseId, LeaseRecord>> out;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (now < it->second.expires_ms) {
      ++it;
      continue;
    }
    UnindexOwnerLocked(it->second.owner, it->first);
    out.emplace_back(it->first, std::move(it->second));
    it = leases_.erase(it);
  }
  return out;
}

LeaseCounts LeaseRegistry::Counts() const {
  MutexLock lock(&mu_);
  LeaseCounts counts;
  for (const auto& [id, record] : leases_) {
    (record.kind == LeaseKind::kRead ? counts.read : counts.write) += 1;
  }
  return counts;
}

}  // namespace lmcache::store
