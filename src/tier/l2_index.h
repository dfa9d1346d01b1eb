// L2Index: what an adapter holds, in memory: each object's size, its locks
// and its LRU position, with a capacity in bytes.
//
// Adapters that manage their own capacity (fs, mock) keep one. Space is
// reserved before an object is written and committed after, so concurrent
// writers never overshoot the capacity; making room evicts least recently
// used unlocked objects through a callback that deletes them from the tier
// while the index is locked (so a concurrent store of the same key cannot be
// deleted by mistake).
//
// Tenants' quotas (store/tenant_ledger.h) hold here too, once an adapter is
// given the limits: a reservation of a tenant at its quota first evicts that
// tenant's own least recently used objects (each tenant keeps its own order,
// so this never walks anyone else's) and is refused when they cannot make
// room; another tenant's objects go only for the tier's capacity.
//
// Thread-safety: internally synchronised (one mutex, a leaf; the eviction
// callback runs under it and must not call back into the index).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "store/object_key.h"

namespace lmcache::tier {

class L2Index {
 public:
  using EvictFn = std::function<void(const store::ObjectKey& key, std::uint64_t bytes)>;
  // The quota of a tenant (cache_salt), or none. Called with the index's
  // mutex held: it must not call back in.
  using LimitFn = std::function<std::optional<std::uint64_t>(std::string_view salt)>;

  enum class Reservation : std::uint8_t {
    kReserved,
    kNoRoom,     // the tier's capacity: its unlocked objects cannot make room
    kOverQuota,  // the tenant's quota: its own unlocked objects cannot make room
  };

  // `capacity_bytes` 0 = unbounded.
  explicit L2Index(std::uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Holds every tenant to `limits` from now on (store/tenant_ledger.h).
  void SetLimits(LimitFn limits) LMC_EXCLUDES(mu_);

  // Reserves `bytes` for a new object of tenant `salt`: the tenant's own
  // unlocked objects (LRU first) are evicted through `evict` to keep it
  // within its quota, then anyone's to fit the capacity. Nothing is evicted
  // when it cannot fit either way.
  Reservation Reserve(std::string_view salt, std::uint64_t bytes, const EvictFn& evict)
      LMC_EXCLUDES(mu_);
  // Gives a reservation back (the write failed).
  void Unreserve(std::string_view salt, std::uint64_t bytes) LMC_EXCLUDES(mu_);
  // Turns a reservation into an object (most recent). False, and the
  // reservation is given back, when the key is held already.
  bool Commit(const store::ObjectKey& key, std::uint64_t bytes) LMC_EXCLUDES(mu_);
  // Adds an object found at startup, least recent first (no reservation;
  // over capacity is allowed and fixed by TrimToCapacity).
  void AddExisting(const store::ObjectKey& key, std::uint64_t bytes) LMC_EXCLUDES(mu_);
  // Evicts unlocked objects until usage fits the capacity.
  void TrimToCapacity(const EvictFn& evict) LMC_EXCLUDES(mu_);

  bool Contains(const store::ObjectKey& key) const LMC_EXCLUDES(mu_);
  // One flag per key: held; held keys are locked and become most recent.
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) LMC_EXCLUDES(mu_);
  void Unlock(std::span<const store::ObjectKey> keys) LMC_EXCLUDES(mu_);
  // Forgets `key` (deleted, found missing or corrupt); its size, if it was held.
  std::optional<std::uint64_t> Erase(const store::ObjectKey& key) LMC_EXCLUDES(mu_);
  enum class Removal : std::uint8_t { kRemoved, kLocked, kAbsent };
  // Forgets `key` unless a load holds it (or whether it does, with `force`);
  // `remove` deletes it from the tier first, under the index's lock.
  Removal Remove(const store::ObjectKey& key, bool force, const EvictFn& remove)
      LMC_EXCLUDES(mu_);
  // Up to `limit` held objects `keep` accepts (null: every one) after
  // `after` (null: from the first), in store::ListingLess order, with their
  // sizes in the tier.
  std::vector<std::pair<store::ObjectKey, std::uint64_t>> List(
      const store::ObjectKey* after, std::size_t limit,
      const std::function<bool(const store::ObjectKey&)>& keep) const LMC_EXCLUDES(mu_);
  // The object's size, if held.
  std::optional<std::uint64_t> SizeOf(const store::ObjectKey& key) const LMC_EXCLUDES(mu_);

  std::uint64_t objects() const LMC_EXCLUDES(mu_);
  std::uint64_t usage_bytes() const LMC_EXCLUDES(mu_);  // held + reserved
  // Tenant `salt`'s bytes, held and reserved.
  std::uint64_t tenant_usage_bytes(std::string_view salt) const LMC_EXCLUDES(mu_);
  std::uint64_t capacity_bytes() const { return capacity_; }

 private:
  using Lru = std::list<store::ObjectKey>;  // front = most recent
  struct Tenant {
    std::uint64_t held_bytes = 0;
    std::uint64_t reserved_bytes = 0;
    std::list<Lru::iterator> lru;  // the tenant's objects in lru_, front = most recent
  };
  struct Entry {
    std::uint64_t bytes = 0;
    std::uint32_t locks = 0;
    Lru::iterator lru;
    Tenant* tenant = nullptr;
    std::list<Lru::iterator>::iterator in_tenant;
  };
  using Entries = std::unordered_map<store::ObjectKey, Entry, store::ObjectKeyHash>;
  struct SaltHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };

  Tenant& TenantLocked(std::string_view salt) LMC_REQUIRES(mu_);
  void ForgetIfIdleLocked(const std::string& salt) LMC_REQUIRES(mu_);
  // Adds a held object as the most recent.
  void InsertLocked(const store::ObjectKey& key, std::uint64_t bytes) LMC_REQUIRES(mu_);
  // Forgets a held object; returns the next position in lru_.
  Lru::iterator RemoveLocked(Entries::iterator entry) LMC_REQUIRES(mu_);
  // Whether `wanted` more bytes fit once unlocked objects are evicted.
  bool CanMakeRoomLocked(std::uint64_t wanted) const LMC_REQUIRES(mu_);
  // Evicts until `wanted` more bytes fit; false (nothing evicted) if they cannot.
  bool MakeRoomLocked(std::uint64_t wanted, const EvictFn& evict) LMC_REQUIRES(mu_);
  // Evicts `salt`'s own unlocked objects until `wanted` more bytes fit its
  // quota; false (nothing evicted) if they cannot.
  bool MakeTenantRoomLocked(std::string_view salt, std::uint64_t wanted, const EvictFn& evict)
      LMC_REQUIRES(mu_);

  const std::uint64_t capacity_;
  mutable Mutex mu_;
  LimitFn limits_ LMC_GUARDED_BY(mu_);
  Entries entries_ LMC_GUARDED_BY(mu_);
  Lru lru_ LMC_GUARDED_BY(mu_);
  // Lists never move inside the map's nodes, so an Entry's pointer stays valid.
  std::unordered_map<std::string, Tenant, SaltHash, std::equal_to<>> tenants_ LMC_GUARDED_BY(mu_);
  std::uint64_t held_bytes_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t reserved_bytes_ LMC_GUARDED_BY(mu_) = 0;
};

}  // namespace lmcache::tier
