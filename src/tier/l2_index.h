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
// Thread-safety: internally synchronised (one mutex, a leaf; the eviction
// callback runs under it and must not call back into the index).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "store/object_key.h"

namespace lmcache::tier {

class L2Index {
 public:
  using EvictFn = std::function<void(const store::ObjectKey& key, std::uint64_t bytes)>;

  // `capacity_bytes` 0 = unbounded.
  explicit L2Index(std::uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Reserves `bytes` for a new object, evicting unlocked objects (LRU first)
  // through `evict` as needed. False when it cannot fit (then nothing is evicted).
  bool Reserve(std::uint64_t bytes, const EvictFn& evict) LMC_EXCLUDES(mu_);
  // Gives a reservation back (the write failed).
  void Unreserve(std::uint64_t bytes) LMC_EXCLUDES(mu_);
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
  // The object's size, if held.
  std::optional<std::uint64_t> SizeOf(const store::ObjectKey& key) const LMC_EXCLUDES(mu_);

  std::uint64_t objects() const LMC_EXCLUDES(mu_);
  std::uint64_t usage_bytes() const LMC_EXCLUDES(mu_);  // held + reserved
  std::uint64_t capacity_bytes() const { return capacity_; }

 private:
  struct Entry {
    std::uint64_t bytes = 0;
    std::uint32_t locks = 0;
    std::list<store::ObjectKey>::iterator lru;  // front = most recent
  };
  // Evicts until `wanted` more bytes fit; false (nothing evicted) if they cannot.
  bool MakeRoomLocked(std::uint64_t wanted, const EvictFn& evict) LMC_REQUIRES(mu_);

  const std::uint64_t capacity_;
  mutable Mutex mu_;
  std::unordered_map<store::ObjectKey, Entry, store::ObjectKeyHash> entries_ LMC_GUARDED_BY(mu_);
  std::list<store::ObjectKey> lru_ LMC_GUARDED_BY(mu_);
  std::uint64_t held_bytes_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t reserved_bytes_ LMC_GUARDED_BY(mu_) = 0;
};

}  // namespace lmcache::tier
