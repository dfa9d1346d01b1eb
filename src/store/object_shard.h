// ObjectShard: the entries of the keys that hash to one shard of the
// ObjectTable, each in one explicit state, and every transition of one key.
//
// A copy of an object is in exactly one state, kept in that state's container:
//   staged       a writer's uncommitted copy under its write lease; several
//                writers (never one owner twice) may stage the same key
//   resident     admitted: readable, read-locked by exact leases, evictable
//                while unlocked; at most one per key
//   retired      a resident copy deleted by force while read-locked: out of
//                the index, freed when its last read lock is released or ends
//   abandoned    a staged copy deleted by force while its write lease lived,
//                or a slot a restart held without a key: freed when its
//                lease finishes or aborts, or at its end time
//   quarantined  a worker's staged copy whose write lease expired while the
//                worker might still write it: freed only when that worker is
//                released (ReleaseQuarantinedLocked), never by time
// Each method named ...Locked performs one key's transition (or one sweep of
// the shard), journals it (SlotJournal: admitted -> Committed, resident
// leaving the index -> Withdrawn, a held slot -> Held) and hands the offsets
// it frees to the caller (`to_free`), who returns them to the allocator once
// the shard is unlocked. An illegal transition changes nothing and says so
// in its result. The ObjectTable routes keys to shards, locks sets of shards,
// keeps lease records, and tells the policy and the listeners.
//
// Thread-safety: every field is guarded by the shard's mutex; every ...Locked
// method requires it held (the table locks sets of shards with Lock()/
// Unlock() in ascending shard order, then calls AssertHeld()).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_set>
#include <vector>

#include <absl/container/node_hash_map.h>

#include "alloc/slab_allocator.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "store/object_key.h"
#include "store/owner.h"
#include "store/slot_journal.h"
#include "store/read_locks.h"
#include "store/tenant_ledger.h"

namespace lmcache::store {

using alloc::Offset;

struct TableStats;
struct ObjectInfo;
enum class WriteOutcome : std::uint8_t;
enum class DeleteOutcome : std::uint8_t;

// What every shard of one table shares: the allocator (slot sizes) and the
// journal (set before the table is used).
struct ShardContext {
  const alloc::SlabAllocator* allocator = nullptr;
  SlotJournal* journal = nullptr;
  // Counts served-once objects freed (the table's counter).
  std::atomic<std::uint64_t>* served_once_dropped = nullptr;
  // Charged and credited at every staged and resident copy's coming and
  // going (tenant_ledger.h); null: no accounting.
  TenantLedger* ledger = nullptr;
  // Pinned objects' aligned bytes, all shards together, and their bound
  // (the table's; ObjectTableConfig::max_pinned_fraction).
  std::atomic<std::uint64_t>* pinned_bytes = nullptr;
  std::uint64_t pinned_limit_bytes = 0;
};

struct ResidentEntry {
  Offset offset = 0;
  std::uint64_t size = 0;  // bytes the writer asked for (slot length); memory is size aligned up
  ReadLocks locks;
  // Its links in its shard's list of lock holders: entries of an
  // node_hash_map never move, and linking costs no hashing and no allocation
  // on the read path.
  ResidentEntry* holder_prev = nullptr;
  ResidentEntry* holder_next = nullptr;
  bool holder = false;
  // Served once (admitted for the readers that asked for it, not kept: a
  // peer's chunk with --p2p-keep-loaded false): freed when its last read lock
  // is released or, its leases expired, at the next reclaim; never in the
  // eviction policy.
  bool served_once = false;
  // Pins (POST /cache/pins), counted: never evicted while pinned; an
  // explicit delete or clear still removes it.
  std::uint32_t pins = 0;
};

struct StagedCopy {
  LeaseId lease = kNoLease;  // the write lease the copy belongs to
  Owner owner;
  Offset offset = 0;
  std::uint64_t size = 0;
  TimeMs expires_ms = 0;  // the write lease's end
};

// A reservation's step for one key (ReserveLocked).
enum class ReserveState : std::uint8_t {
  kResident,     // the key is resident: nothing staged (an offered slot is freed)
  kReserved,     // staged under the lease, at `offset`
  kNeedsMemory,  // not staged: offer a slot
  kOverQuota,    // not staged: the key's tenant is at its quota (the offered slot is freed)
};
struct ReserveStep {
  ReserveState state = ReserveState::kNeedsMemory;
  Offset offset = 0;
};

// An admission's step for one key (AdmitLocked). `resident` is the key's
// resident entry afterwards (this copy, another writer's, or none).
struct AdmitStep {
  WriteOutcome outcome;
  ResidentEntry* resident = nullptr;
  std::uint64_t aligned_bytes = 0;  // kAdmitted: the slot's bytes
};

struct DeleteStep {
  DeleteOutcome outcome;
  bool removed_resident = false;    // a resident copy left the index
  std::uint64_t aligned_bytes = 0;  // its slot's bytes
};

enum class EvictState : std::uint8_t { kEvicted, kLocked, kAbsent };

enum class PinOutcome : std::uint8_t {
  kPinned,       // one more pin (the first takes the object's bytes from the bound)
  kNotResident,  // nothing to pin (absent, staged, or served once)
  kOverLimit,    // a first pin would take the pinned bytes past their bound
};
enum class UnpinOutcome : std::uint8_t { kUnpinned, kNotPinned };
struct EvictStep {
  EvictState state = EvictState::kAbsent;
  std::uint64_t aligned_bytes = 0;  // kEvicted: the slot's bytes
};

struct ReclaimStep {
  std::uint64_t expired_writes = 0;  // staged copies whose write lease ended
  std::uint64_t quarantined = 0;     // of them, a worker's: kept until it is released
};

class ObjectShard {
 public:
  explicit ObjectShard(const ShardContext* context) : context_(context) {}
  ObjectShard(const ObjectShard&) = delete;
  ObjectShard& operator=(const ObjectShard&) = delete;

  void Lock() LMC_ACQUIRE(mu_) { mu_.Lock(); }
  void Unlock() LMC_RELEASE(mu_) { mu_.Unlock(); }
  void AssertHeld() const LMC_ASSERT_CAPABILITY(mu_) { mu_.AssertHeld(); }

  // --- writes ---
  // One key of `owner`'s reservation under `lease` (expiring at `expires_ms`):
  // a resident key stays so; `owner`'s staged copy of the same size moves to
  // `lease` (a repeated reservation gets its buffer back); one of another
  // size is freed; otherwise `offered` (a fresh slot, if any) is staged when
  // the key's tenant may be charged for it. An offered slot that is not
  // staged goes to `to_free`.
  ReserveStep ReserveLocked(const ObjectKey& key, const Owner& owner, std::uint64_t size,
                            LeaseId lease, TimeMs expires_ms, std::optional<Offset> offered,
                            std::vector<Offset>* to_free) LMC_REQUIRES(mu_);
  // Admits `lease`'s staged copy of `key`: kAdmitted (journaled), or freed as
  // kLeaseExpired or kDuplicateDiscarded (another copy was admitted first).
  // kNotStaged when the lease staged none; an abandoned copy of it is freed.
  AdmitStep AdmitLocked(const ObjectKey& key, LeaseId lease, TimeMs now,
                        std::vector<Offset>* to_free) LMC_REQUIRES(mu_);
  // Frees `lease`'s staged (or abandoned) copy of `key`; false if none.
  bool AbortLocked(const ObjectKey& key, LeaseId lease, std::vector<Offset>* to_free)
      LMC_REQUIRES(mu_);

  // --- reads ---
  ResidentEntry* FindResidentLocked(const ObjectKey& key) LMC_REQUIRES(mu_);
  // Adds `count` locks of `lease` (held by `owner`, for `ttl_ms`) to the
  // resident `entry`, the first taken over from one of `consume` where one
  // holds a lock. Returns whether one was taken over.
  bool LockReadLocked(ResidentEntry* entry, LeaseId lease, const Owner& owner, std::uint32_t count,
                      std::span<const LeaseId> consume, TimeMs now, TimeMs ttl_ms)
      LMC_REQUIRES(mu_);
  // Makes the just admitted `entry` of `key` served once (ResidentEntry).
  void MarkServedOnceLocked(const ObjectKey& key, ResidentEntry* entry) LMC_REQUIRES(mu_);
  // Releases up to `count` locks of `lease` on `key`, resident or retired (a
  // retired copy, or a served-once one, whose last lock went is freed).
  // Returns how many.
  std::uint32_t UnlockReadLocked(const ObjectKey& key, LeaseId lease, std::uint32_t count,
                                 TimeMs now, std::vector<Offset>* to_free) LMC_REQUIRES(mu_);

  // --- pins ---
  // `*first` is set when this pin is the object's first (it leaves the
  // eviction order), `*last` when this unpin took its last (it returns).
  PinOutcome PinLocked(const ObjectKey& key, bool* first) LMC_REQUIRES(mu_);
  UnpinOutcome UnpinLocked(const ObjectKey& key, bool* last) LMC_REQUIRES(mu_);

  // --- removal ---
  // Deletes `key`'s copies. Expired staged copies go in any case. Without
  // `force` a read-locked or live staged copy leaves the key alone (kLocked);
  // with it, a locked resident copy is retired and live staged ones abandoned.
  DeleteStep DeleteLocked(const ObjectKey& key, bool force, TimeMs now,
                          std::vector<Offset>* to_free) LMC_REQUIRES(mu_);
  // Evicts `key`'s resident copy if it is neither read-locked nor pinned.
  EvictStep EvictLocked(const ObjectKey& key, TimeMs now, std::vector<Offset>* to_free)
      LMC_REQUIRES(mu_);
  // Ends what time ended: expired staged copies (a worker's quarantined, the
  // rest freed), retired and served-once copies no longer locked, abandoned
  // ones past their end.
  ReclaimStep ReclaimLocked(TimeMs now, std::vector<Offset>* to_free) LMC_REQUIRES(mu_);
  // Frees `writer`'s quarantined copies (it can no longer write). Returns how many.
  std::uint64_t ReleaseQuarantinedLocked(const Owner& writer, std::vector<Offset>* to_free)
      LMC_REQUIRES(mu_);

  // --- handover ---
  // Admits an adopted object (not journaled: the caller records adoption in
  // the predecessor's order). nullptr if the key is resident already.
  ResidentEntry* AdoptLocked(const ObjectKey& key, Offset offset, std::uint64_t size)
      LMC_REQUIRES(mu_);
  // Keeps a slot a predecessor had lent from reuse until `until_ms` (journaled).
  void HoldLocked(Offset offset, std::uint64_t size, TimeMs until_ms) LMC_REQUIRES(mu_);
  void ReserveResidentLocked(std::size_t more) LMC_REQUIRES(mu_) {
    resident_.reserve(resident_.size() + more);
  }
  std::size_t resident_count_locked() const LMC_REQUIRES(mu_) { return resident_.size(); }
  void ForEachResidentLocked(
      const std::function<void(const ObjectKey&, const ResidentEntry&)>& visit) const
      LMC_REQUIRES(mu_);
  // Every slot lent or kept out of the index (staged, retired, abandoned, quarantined).
  void ForEachHeldSlotLocked(const std::function<void(Offset, std::uint64_t)>& visit) const
      LMC_REQUIRES(mu_);

  // --- inspection ---
  std::optional<ObjectInfo> FindLocked(const ObjectKey& key, TimeMs now) const LMC_REQUIRES(mu_);
  // Every key resident or staged (a clear's list).
  std::vector<ObjectKey> KeysLocked() const LMC_REQUIRES(mu_);
  // Adds this shard's figures to `stats`; unlinks lock holders seen unlocked.
  void AddStatsLocked(TimeMs now, TableStats* stats) LMC_REQUIRES(mu_);

 private:
  struct RetiredObject {
    ObjectKey key;
    Offset offset = 0;
    std::uint64_t size = 0;
    ReadLocks locks;
  };
  struct AbandonedCopy {
    ObjectKey key;  // empty for a slot a restart held
    Offset offset = 0;
    std::uint64_t size = 0;
    LeaseId lease = kNoLease;
    TimeMs expires_ms = 0;
  };
  struct QuarantinedCopy {
    Offset offset = 0;
    std::uint64_t size = 0;
    Owner writer;
  };
  // Swiss tables (absl) for the two indexes every store probes: a probe of a
  // large index reads a row of one-byte tags and then the entry, where
  // std::unordered_map read the bucket, the node before it and the node (at
  // chunk size 1, with a few hundred thousand objects, each a cache and TLB
  // miss; docs/performance.md, "Chunk size 1"). node_hash_map keeps each
  // entry where it was made, as ResidentEntry's links need.
  using StagingMap = absl::node_hash_map<ObjectKey, std::vector<StagedCopy>, ObjectKeyHash>;

  std::uint64_t Aligned(std::uint64_t size) const { return context_->allocator->AlignedSize(size); }
  // The tenant of `key` no longer holds a copy of `size` bytes (tenant_ledger.h;
  // called at a transition, under the shard's mutex, but touching only the ledger).
  void CreditTenant(const ObjectKey& key, std::uint64_t size) const {
    if (context_->ledger != nullptr) context_->ledger->Credit(key.cache_salt, Aligned(size));
  }
  ResidentEntry* AdmitResidentLocked(const ObjectKey& key, Offset offset, std::uint64_t size)
      LMC_REQUIRES(mu_);
  // Gives a new resident `entry` its slot and counts its bytes.
  void FillResidentLocked(ResidentEntry* entry, Offset offset, std::uint64_t size)
      LMC_REQUIRES(mu_);
  void EraseResidentLocked(const ObjectKey& key, ResidentEntry* entry) LMC_REQUIRES(mu_);
  // Frees a served-once `entry` of `key` whose last lock went.
  void DropServedOnceLocked(const ObjectKey& key, ResidentEntry* entry,
                            std::vector<Offset>* to_free) LMC_REQUIRES(mu_);
  // Removes and returns the staged copy of `key` that `match` selects.
  std::optional<StagedCopy> TakeStagedLocked(const ObjectKey& key,
                                             const std::function<bool(const StagedCopy&)>& match)
      LMC_REQUIRES(mu_);
  StagedCopy* FindStagedLocked(const ObjectKey& key, const Owner& owner) LMC_REQUIRES(mu_);
  bool FreeAbandonedLocked(const ObjectKey& key, LeaseId lease, std::vector<Offset>* to_free)
      LMC_REQUIRES(mu_);
  void AddHolderLocked(ResidentEntry* entry) LMC_REQUIRES(mu_);
  void RemoveHolderLocked(ResidentEntry* entry) LMC_REQUIRES(mu_);

  const ShardContext* const context_;
  mutable Mutex mu_;
  absl::node_hash_map<ObjectKey, ResidentEntry, ObjectKeyHash> resident_ LMC_GUARDED_BY(mu_);
  StagingMap staged_ LMC_GUARDED_BY(mu_);
  std::vector<RetiredObject> retired_ LMC_GUARDED_BY(mu_);
  std::vector<AbandonedCopy> abandoned_ LMC_GUARDED_BY(mu_);
  std::vector<QuarantinedCopy> quarantined_ LMC_GUARDED_BY(mu_);
  // The resident keys served once (few: what peers' loads are being read
  // for), so a reclaim visits them without walking every resident object.
  std::unordered_set<ObjectKey, ObjectKeyHash> served_once_ LMC_GUARDED_BY(mu_);
  // What AddStatsLocked reads instead of walking every resident object: their
  // aligned bytes, kept as entries come and go, and the entries given a read
  // lock and not seen unlocked since (a superset of the locked ones), as an
  // intrusive list (membership costs no memory beyond the entry's links).
  std::uint64_t resident_bytes_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t pinned_objects_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t pinned_bytes_ LMC_GUARDED_BY(mu_) = 0;
  ResidentEntry* holders_ LMC_GUARDED_BY(mu_) = nullptr;
};

}  // namespace lmcache::store
