// EvictionPolicy: chooses which resident objects to evict first.
//
// The object table reports admissions, accesses and removals; the policy keeps
// an order and hands out candidates, oldest first. Candidates may be locked:
// the table re-checks each one and skips what it cannot evict. Admissions and
// accesses arrive as batches in chunk order (head of the prompt first), and
// policies that track recency treat the head as the most recent, so the tail
// of a prefix is evicted before its head (a retained prefix stays usable).
//
// Thread-safety: implementations are internally synchronised. The table calls
// them while holding shard mutexes, so a policy must never call back into the
// table (lock order: table shard -> policy).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "lmcache/status.h"
#include "store/object_key.h"

namespace lmcache::store {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  virtual void OnAdmitted(std::span<const ObjectKey> keys) = 0;
  virtual void OnAccessed(std::span<const ObjectKey> keys) = 0;
  virtual void OnRemoved(std::span<const ObjectKey> keys) = 0;
  // Up to `max_count` candidates starting at position `skip` of the eviction
  // order (skip lets a caller step over candidates it found locked).
  virtual std::vector<ObjectKey> Candidates(std::size_t skip, std::size_t max_count) const = 0;
  virtual std::size_t size() const = 0;
};

// Least recently used first.
class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "LRU"; }
  void OnAdmitted(std::span<const ObjectKey> keys) override LMC_EXCLUDES(mu_);
  void OnAccessed(std::span<const ObjectKey> keys) override LMC_EXCLUDES(mu_);
  void OnRemoved(std::span<const ObjectKey> keys) override LMC_EXCLUDES(mu_);
  std::vector<ObjectKey> Candidates(std::size_t skip, std::size_t max_count) const override
      LMC_EXCLUDES(mu_);
  std::size_t size() const override LMC_EXCLUDES(mu_);

 private:
  // Moves (or inserts) every key to the most-recent end, the batch's first key last.
  void MakeMostRecentLocked(std::span<const ObjectKey> keys, bool insert_unknown) LMC_REQUIRES(mu_);

  mutable Mutex mu_;
  std::list<ObjectKey> order_ LMC_GUARDED_BY(mu_);  // front = least recently used
  std::unordered_map<ObjectKey, std::list<ObjectKey>::iterator, ObjectKeyHash> where_
      LMC_GUARDED_BY(mu_);
};

// Never evicts (L1 as a pure write buffer, or when the operator sizes L1 by hand).
class NoopPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "noop"; }
  void OnAdmitted(std::span<const ObjectKey>) override {}
  void OnAccessed(std::span<const ObjectKey>) override {}
  void OnRemoved(std::span<const ObjectKey>) override {}
  std::vector<ObjectKey> Candidates(std::size_t, std::size_t) const override { return {}; }
  std::size_t size() const override { return 0; }
};

// "LRU" or "noop" (case-insensitive, as --eviction-policy accepts them).
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name);

}  // namespace lmcache::store
