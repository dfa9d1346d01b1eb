// ObjectTable: the L1 object index, its leases and the eviction mechanism.
//
// An object is first *staged* by one writer (reserve_write: memory allocated,
// write-leased, invisible to readers), then *admitted* as resident
// (finish_write) or dropped (abort_write). Readers take owner-tracked,
// TTL-bounded read leases on resident objects (reserve_read / finish_read with
// a count of 1..128). This follows the reference's newest state machine (spec
// 7.3): several writers may stage the same key; the first finish_write admits
// it and later copies are discarded. A resident key is never overwritten.
//
// Beyond the reference: every lease records its owner, so ReleaseOwner() drops
// everything a departed client held; a forced delete or clear of a locked
// object *retires* it (gone from the index at once, memory freed only when its
// last lease ends) so an in-flight copy never touches reused memory; and when a
// reservation cannot be allocated, unlocked objects are evicted on demand.
//
// Batches are atomic: every key of a batch is examined and changed under the
// mutexes of all shards it touches, taken in ascending shard order.
//
// Thread-safety: internally synchronised; every method may be called from any
// thread. Lock order: shard mutexes (ascending index) -> eviction policy mutex
// -> allocator mutex. The policy and the allocator never call back in.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "alloc/slab_allocator.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "lmcache/status.h"
#include "store/eviction_policy.h"
#include "store/object_key.h"
#include "store/read_lease.h"

namespace lmcache::store {

using alloc::Offset;

struct ObjectTableConfig {
  TimeMs write_ttl_ms = 600'000;   // --l1-write-ttl-seconds (600 s)
  TimeMs read_ttl_ms = 300'000;    // --l1-read-ttl-seconds (300 s)
  std::uint32_t num_shards = 64;   // power of two not required; > 0
  bool on_demand_eviction = true;  // evict LRU objects when a reservation cannot allocate
};

inline constexpr std::uint32_t kMaxReadLockCount = 128;

// How ReserveWrite allocates the keys that need memory.
enum class AllocationMode {
  kAllOrNothing,   // every key gets memory, or none does
  kLongestPrefix,  // as many keys as fit, in batch order
};

enum class WriteReservation : std::uint8_t {
  kReserved,         // staged for this owner (new, or the owner's earlier staging handed back)
  kAlreadyResident,  // skipped: the key is cached already
  kOutOfMemory,      // skipped: no memory even after eviction
};

struct ReserveWriteResult {
  std::vector<WriteReservation> outcomes;  // one per key
  std::vector<Offset> offsets;             // valid where outcomes[i] == kReserved
  std::size_t reserved = 0;
  std::size_t out_of_memory = 0;
};

enum class WriteOutcome : std::uint8_t {
  kAdmitted,            // now resident and readable
  kDuplicateDiscarded,  // another writer admitted it first; this copy was freed
  kNotStaged,           // this owner had no staging entry (or it was deleted)
  kLeaseExpired,        // the write lease ran out; the copy was freed
};

enum class ReadMode {
  kEach,          // lock every resident key
  kPrefix,        // lock resident keys up to the first missing one
  kAllOrNothing,  // lock all keys, or none if any is missing
};

struct ReadGrant {
  bool granted = false;
  Offset offset = 0;
  std::uint64_t size = 0;
};

enum class ReleaseOutcome : std::uint8_t { kReleased, kNotLocked, kNotFound };
enum class DeleteOutcome : std::uint8_t { kDeleted, kLocked, kNotFound };

enum class ObjectState : std::uint8_t { kResident, kStaging };
struct ObjectInfo {
  ObjectState state = ObjectState::kResident;
  Offset offset = 0;
  std::uint64_t size = 0;
  std::uint32_t read_locks = 0;  // live read locks (resident only)
};

struct OwnerReleaseReport {
  std::uint64_t read_locks_released = 0;
  std::uint64_t writes_aborted = 0;
};

struct EvictionReport {
  std::uint64_t objects = 0;
  std::uint64_t bytes = 0;  // aligned bytes returned to the allocator
};

struct TableStats {
  std::uint64_t resident_objects = 0;
  std::uint64_t resident_bytes = 0;
  std::uint64_t staging_objects = 0;
  std::uint64_t staging_bytes = 0;
  std::uint64_t locked_objects =
      0;  // resident with a live read lease, or staging with a live write lease
  std::uint64_t locked_bytes = 0;
  std::uint64_t retired_objects = 0;  // force-deleted while locked, freed when the lease ends
  std::uint64_t retired_bytes = 0;
  std::uint64_t evicted_objects = 0;
  std::uint64_t evicted_bytes = 0;
  std::uint64_t on_demand_evictions = 0;  // reservations that evicted to make room
  std::uint64_t expired_writes_reclaimed = 0;
};

struct ResidentEntry;  // object_table_internal.h

class ObjectTable {
 public:
  // `allocator`, `policy` and `clock` must outlive the table.
  ObjectTable(alloc::SlabAllocator* allocator, EvictionPolicy* policy, const Clock* clock,
              const ObjectTableConfig& config);
  ~ObjectTable();
  ObjectTable(const ObjectTable&) = delete;
  ObjectTable& operator=(const ObjectTable&) = delete;

  // Stages every key that is not resident for `owner`, all with `size` bytes.
  // Keys must be valid and distinct. Errors only for invalid input.
  Result<ReserveWriteResult> ReserveWrite(std::span<const ObjectKey> keys, std::uint64_t size,
                                          OwnerId owner, AllocationMode mode);
  std::vector<WriteOutcome> FinishWrite(std::span<const ObjectKey> keys, OwnerId owner);
  // Drops `owner`'s staging entries of these keys; returns how many.
  std::size_t AbortWrite(std::span<const ObjectKey> keys, OwnerId owner);

  // Takes `count` (1..128) read locks on each granted key for `owner`.
  Result<std::vector<ReadGrant>> ReserveRead(std::span<const ObjectKey> keys, std::uint32_t count,
                                             OwnerId owner, ReadMode mode);
  // For a transfer out of keys a lookup locked: all keys must be resident, or
  // nothing changes and the grants are all false. A key whose read lease has
  // expired meanwhile is locked again for `owner` (an expired lease makes an
  // object evictable, not unreadable), so every granted key is locked while the
  // copy runs; the caller releases one lock per key when it is done.
  Result<std::vector<ReadGrant>> AcquireForRead(std::span<const ObjectKey> keys, OwnerId owner);
  // Releases `count` (1..128) read locks per key, `owner`'s first.
  Result<std::vector<ReleaseOutcome>> FinishRead(std::span<const ObjectKey> keys,
                                                 std::uint32_t count, OwnerId owner);

  // Deletes resident and staged copies. Without `force`, a key with a live
  // lease is left alone (kLocked); with it, locked copies are retired.
  std::vector<DeleteOutcome> Delete(std::span<const ObjectKey> keys, bool force);
  // Deletes every object (every unlocked one unless `force`). Returns how many went.
  std::uint64_t Clear(bool force);
  // Marks resident keys as recently used.
  void Touch(std::span<const ObjectKey> keys);

  // Releases every read lock of `owner` and aborts its staged writes.
  OwnerReleaseReport ReleaseOwner(OwnerId owner);

  // Evicts unlocked resident objects in policy order until `bytes` are freed
  // or no candidate is left.
  EvictionReport EvictLru(std::uint64_t bytes);
  // Frees staging copies whose write lease expired and retired objects whose
  // leases ended. Returns how many objects were freed.
  std::uint64_t ReclaimExpired();

  std::optional<ObjectInfo> Find(const ObjectKey& key) const;
  TableStats Stats() const;

  alloc::SlabAllocator& allocator() const { return *allocator_; }
  const ObjectTableConfig& config() const { return config_; }

 private:
  struct Shard;
  class ShardSetLock;

  Shard& ShardOf(const ObjectKey& key) const;
  std::uint32_t ShardIndex(const ObjectKey& key) const;
  Status ValidateKeys(std::span<const ObjectKey> keys, bool require_distinct) const;
  // The resident entry of each key (nullptr where absent, and after the first
  // miss in kPrefix mode), with the keys' shards locked by the caller. False,
  // with nothing collected, when a key is missing in kAllOrNothing mode.
  bool CollectResident(std::span<const ObjectKey> keys, ReadMode mode,
                       std::vector<ResidentEntry*>* entries) const;
  // Allocates up to `count` objects, evicting on demand; fewer than `count`
  // only in kLongestPrefix mode.
  Result<std::vector<Offset>> AllocateWithEviction(std::uint64_t size, std::size_t count,
                                                   AllocationMode mode);
  void FreeOffset(Offset offset);

  alloc::SlabAllocator* const allocator_;
  EvictionPolicy* const policy_;
  const Clock* const clock_;
  const ObjectTableConfig config_;
  std::unique_ptr<Shard[]> shards_;

  std::atomic<std::uint64_t> evicted_objects_{0};
  std::atomic<std::uint64_t> evicted_bytes_{0};
  std::atomic<std::uint64_t> on_demand_evictions_{0};
  std::atomic<std::uint64_t> expired_writes_reclaimed_{0};
};

}  // namespace lmcache::store
