#include "store/eviction_policy.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace lmcache::store {

LruPolicy::TenantOrder* LruPolicy::TenantOrderLocked(const std::string& salt) {
  auto it = tenants_.find(std::string_view(salt));
  if (it == tenants_.end()) it = tenants_.try_emplace(salt).first;
  return &it->second;
}

void LruPolicy::MoveToBackLocked(Order::iterator node) {
  node->last_use = ++uses_;
  order_.splice(order_.end(), order_, node);
  if (node->tenant != nullptr) {
    node->tenant->splice(node->tenant->end(), *node->tenant, node->in_tenant);
  }
}

void LruPolicy::MakeMostRecentLocked(std::span<const ObjectKey> keys, bool insert_unknown) {
  // The keys of a batch are almost always one tenant's: one lookup of its order.
  TenantOrder* tenant = nullptr;
  const std::string* tenant_salt = nullptr;
  // Walk the batch backwards so its first key (the head of the prompt) ends up
  // most recent and the tail is evicted first.
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    if (!insert_unknown) {
      if (auto found = where_.find(*it); found != where_.end()) MoveToBackLocked(*found);
      continue;
    }
    // One hash per key: an admission is usually of a key not yet known, so
    // its node is made first and indexed, and taken back if the key was known.
    order_.push_back(Node{*it, ++uses_, nullptr, {}});
    auto [found, inserted] = where_.insert(std::prev(order_.end()));
    if (!inserted) {
      order_.pop_back();
      --uses_;
      MoveToBackLocked(*found);
      continue;
    }
    if (!per_tenant_order_) continue;
    if (tenant_salt == nullptr || *tenant_salt != it->cache_salt) {
      tenant = TenantOrderLocked(it->cache_salt);
      tenant_salt = &it->cache_salt;
    }
    Node& node = order_.back();
    tenant->push_back(&node);
    node.tenant = tenant;
    node.in_tenant = std::prev(tenant->end());
  }
}

void LruPolicy::OnAdmitted(std::span<const ObjectKey> keys) {
  MutexLock lock(&mu_);
  MakeMostRecentLocked(keys, /*insert_unknown=*/true);
}

void LruPolicy::OnAccessed(std::span<const ObjectKey> keys) {
  MutexLock lock(&mu_);
  MakeMostRecentLocked(keys, /*insert_unknown=*/false);
}

void LruPolicy::OnRemoved(std::span<const ObjectKey> keys) {
  MutexLock lock(&mu_);
  for (const ObjectKey& key : keys) {
    auto found = where_.find(key);
    if (found == where_.end()) continue;
    const Order::iterator position = *found;
    where_.erase(found);  // before its node, whose key the set's hash reads
    if (position->tenant != nullptr) {
      position->tenant->erase(position->in_tenant);
      if (position->tenant->empty()) tenants_.erase(position->key.cache_salt);
    }
    order_.erase(position);
  }
}

template <typename Visit>
void LruPolicy::WalkLocked(std::size_t skip, std::size_t max_count, Visit visit) const {
  if (skip >= order_.size()) return;
  auto it = std::next(order_.begin(), static_cast<std::ptrdiff_t>(skip));
  for (std::size_t n = 0; it != order_.end() && n < max_count; ++it, ++n) visit(*it);
}

std::vector<ObjectKey> LruPolicy::Candidates(std::size_t skip, std::size_t max_count) const {
  MutexLock lock(&mu_);
  std::vector<ObjectKey> out;
  WalkLocked(skip, max_count, [&out](const Node& node) { out.push_back(node.key); });
  return out;
}

std::vector<UsedCandidate> LruPolicy::UsedCandidates(std::size_t skip,
                                                     std::size_t max_count) const {
  MutexLock lock(&mu_);
  std::vector<UsedCandidate> out;
  WalkLocked(skip, max_count,
             [&out](const Node& node) { out.push_back({node.key, node.last_use}); });
  return out;
}

std::vector<ObjectKey> LruPolicy::TenantCandidates(std::string_view salt, std::size_t skip,
                                                   std::size_t max_count) const {
  MutexLock lock(&mu_);
  std::vector<ObjectKey> out;
  if (!per_tenant_order_) {
    for (const Node& node : order_) {
      if (out.size() >= max_count) break;
      if (node.key.cache_salt != salt) continue;
      if (skip > 0) {
        skip -= 1;
        continue;
      }
      out.push_back(node.key);
    }
    return out;
  }
  auto tenant = tenants_.find(salt);
  if (tenant == tenants_.end() || skip >= tenant->second.size()) return out;
  auto it = std::next(tenant->second.begin(), static_cast<std::ptrdiff_t>(skip));
  for (; it != tenant->second.end() && out.size() < max_count; ++it) out.push_back((*it)->key);
  return out;
}

std::size_t LruPolicy::size() const {
  MutexLock lock(&mu_);
  return order_.size();
}

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                           bool per_tenant_order) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "lru") return std::unique_ptr<EvictionPolicy>(new LruPolicy(per_tenant_order));
  if (lower == "noop") return std::unique_ptr<EvictionPolicy>(new NoopPolicy());
  return InvalidConfig("--eviction-policy: unknown policy '" + std::string(name) +
                       "'; use LRU or noop");
}

}  // namespace lmcache::store
