// EvictionPolicy: chooses which resident objects to evict first.
//
// The object table reports admissions, accesses and removals; the policy keeps
// an order and hands out candidates, oldest first. Candidates may be locked:
// the table re-checks each one and skips what it cannot evict. Admissions and
// accesses arrive as batches in chunk order (head of the prompt first), and
// policies that track recency treat the head as the most recent, so the tail
// of a prefix is evicted before its head (a retained prefix stays usable).
//
// Policies that keep an order also keep it per tenant (cache_salt), so a
// tenant at its quota can be trimmed of its own oldest objects without
// walking everyone else's (tenant_ledger.h).
//
// A policy that tracks recency also stamps each key with its last use (a
// count of the uses it saw: admissions and accesses, one per key), so a
// caller that reorders candidates (the evictor's last-copy bias, evictor.h)
// can bound how far out of order it goes.
//
// Thread-safety: implementations are internally synchronised. The table calls
// them while holding shard mutexes, so a policy must never call back into the
// table (lock order: table shard -> policy).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <absl/container/flat_hash_set.h>

#include "common/mutex.h"
#include "lmcache/status.h"
#include "store/object_key.h"

namespace lmcache::store {

// A candidate and its last use (uses count up; 0: the policy keeps no recency).
struct UsedCandidate {
  ObjectKey key;
  std::uint64_t last_use = 0;
};

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
  // The same, with each candidate's last use.
  virtual std::vector<UsedCandidate> UsedCandidates(std::size_t skip,
                                                    std::size_t max_count) const = 0;
  // The same, among the keys of tenant `salt` only.
  virtual std::vector<ObjectKey> TenantCandidates(std::string_view salt, std::size_t skip,
                                                  std::size_t max_count) const = 0;
  virtual std::size_t size() const = 0;
};

// Least recently used first.
class LruPolicy final : public EvictionPolicy {
 public:
  // Without `per_tenant_order` (quotas off) no tenant order is kept and
  // TenantCandidates walks the whole order.
  explicit LruPolicy(bool per_tenant_order = true) : per_tenant_order_(per_tenant_order) {}
  std::string_view name() const override { return "LRU"; }
  void OnAdmitted(std::span<const ObjectKey> keys) override LMC_EXCLUDES(mu_);
  void OnAccessed(std::span<const ObjectKey> keys) override LMC_EXCLUDES(mu_);
  void OnRemoved(std::span<const ObjectKey> keys) override LMC_EXCLUDES(mu_);
  std::vector<ObjectKey> Candidates(std::size_t skip, std::size_t max_count) const override
      LMC_EXCLUDES(mu_);
  std::vector<UsedCandidate> UsedCandidates(std::size_t skip, std::size_t max_count) const override
      LMC_EXCLUDES(mu_);
  std::vector<ObjectKey> TenantCandidates(std::string_view salt, std::size_t skip,
                                          std::size_t max_count) const override LMC_EXCLUDES(mu_);
  std::size_t size() const override LMC_EXCLUDES(mu_);

 private:
  struct Node;
  using TenantOrder = std::list<Node*>;  // front = least recently used
  struct Node {
    ObjectKey key;
    std::uint64_t last_use = 0;
    TenantOrder* tenant = nullptr;  // null without per-tenant order
    TenantOrder::iterator in_tenant;
  };
  using Order = std::list<Node>;
  // The index of the order by key, holding only each node's position: the
  // key is kept once, in its node (a 1 KiB object at chunk size 1 paid a
  // second copy of about 150 bytes and its allocations here). Lookups by an
  // ObjectKey are heterogeneous.
  struct NodeHash {
    using is_transparent = void;
    std::size_t operator()(const ObjectKey& key) const { return ObjectKeyHash{}(key); }
    std::size_t operator()(Order::iterator node) const { return ObjectKeyHash{}(node->key); }
  };
  struct NodeEqual {
    using is_transparent = void;
    static const ObjectKey& KeyOf(const ObjectKey& key) { return key; }
    static const ObjectKey& KeyOf(Order::iterator node) { return node->key; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return KeyOf(a) == KeyOf(b);
    }
  };
  struct SaltHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };

  // Moves (or inserts) every key to the most-recent end, the batch's first key last.
  void MakeMostRecentLocked(std::span<const ObjectKey> keys, bool insert_unknown) LMC_REQUIRES(mu_);
  void MoveToBackLocked(Order::iterator node) LMC_REQUIRES(mu_);
  // Walks `max_count` nodes of the order from position `skip`.
  template <typename Visit>
  void WalkLocked(std::size_t skip, std::size_t max_count, Visit visit) const LMC_REQUIRES(mu_);
  // The tenant order of `salt`, made if absent; `last` caches the batch's last lookup.
  TenantOrder* TenantOrderLocked(const std::string& salt) LMC_REQUIRES(mu_);

  const bool per_tenant_order_;
  mutable Mutex mu_;
  Order order_ LMC_GUARDED_BY(mu_);  // front = least recently used
  std::uint64_t uses_ LMC_GUARDED_BY(mu_) = 0;  // the last use stamped
  // A Swiss table (object_shard.h says why): the positions are values, so flat.
  absl::flat_hash_set<Order::iterator, NodeHash, NodeEqual> where_ LMC_GUARDED_BY(mu_);
  // Lists never move inside the map's nodes, so a Node's pointer stays valid.
  std::unordered_map<std::string, TenantOrder, SaltHash, std::equal_to<>> tenants_
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
  std::vector<UsedCandidate> UsedCandidates(std::size_t, std::size_t) const override {
    return {};
  }
  std::vector<ObjectKey> TenantCandidates(std::string_view, std::size_t,
                                          std::size_t) const override {
    return {};
  }
  std::size_t size() const override { return 0; }
};

// "LRU" or "noop" (case-insensitive, as --eviction-policy accepts them).
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                           bool per_tenant_order = true);

}  // namespace lmcache::store
