#include "store/eviction_policy.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace lmcache::store {

void LruPolicy::MakeMostRecentLocked(std::span<const ObjectKey> keys, bool insert_unknown) {
  // Walk the batch backwards so its first key (the head of the prompt) ends up
  // most recent and the tail is evicted first.
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    if (insert_unknown) {
      // One hash per key: an admission is usually of a key not yet known.
      auto [found, inserted] = where_.try_emplace(*it, order_.end());
      if (inserted) {
        order_.push_back(*it);
        found->second = std::prev(order_.end());
      } else {
        order_.splice(order_.end(), order_, found->second);
      }
      continue;
    }
    if (auto found = where_.find(*it); found != where_.end()) {
      order_.splice(order_.end(), order_, found->second);
    }
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
    order_.erase(found->second);
    where_.erase(found);
  }
}

std::vector<ObjectKey> LruPolicy::Candidates(std::size_t skip, std::size_t max_count) const {
  MutexLock lock(&mu_);
  std::vector<ObjectKey> out;
  if (skip >= order_.size()) return out;
  auto it = std::next(order_.begin(), static_cast<std::ptrdiff_t>(skip));
  for (; it != order_.end() && out.size() < max_count; ++it) out.push_back(*it);
  return out;
}

std::size_t LruPolicy::size() const {
  MutexLock lock(&mu_);
  return order_.size();
}

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "lru") return std::unique_ptr<EvictionPolicy>(new LruPolicy());
  if (lower == "noop") return std::unique_ptr<EvictionPolicy>(new NoopPolicy());
  return InvalidConfig("--eviction-policy: unknown policy '" + std::string(name) +
                       "'; use LRU or noop");
}

}  // namespace lmcache::store
