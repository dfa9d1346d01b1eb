// ObjectTable: the L1 object index, its leases and the eviction mechanism.
//
// An object is first *staged* by one writer (reserve_write: memory allocated,
// write-leased, invisible to readers), then *admitted* as resident
// (finish_write) or dropped (abort_write). Readers take read leases on
// resident objects. This follows the reference's newest state machine (spec
// 7.3): several writers may stage the same key; the first finish_write admits
// it and later copies are discarded. A resident key is never overwritten.
//
// Leases are exact (docs/threading.md, "Lease rules"). Every acquisition
// returns a LeaseId; every lock and staged copy belongs to exactly one lease
// and one Owner (owner.h); a release names its lease and releases nothing
// else, and ReleaseOwner() drops everything of one owner at once. An expired
// read lease makes an object evictable; it is never transferred to anyone. A
// reader may consume its share of another lease (a lookup's locks) by
// transferring one lock per object to its own lease, atomically.
//
// Beyond the reference: a forced delete or clear of a locked object *retires*
// it (gone from the index at once, memory freed only when its last lease
// ends) so an in-flight copy never touches reused memory; and when a
// reservation cannot be allocated, unlocked objects are evicted on demand.
// Leases of device owners (Owner::Device: the copies the server itself runs
// between a GPU and L1) never expire: a device copy may still be reading or
// writing its objects, and a late copy into memory that expiry handed to
// another object would corrupt it silently. They end only with the copy's
// completion, which the CUDA-IPC path bounds (--gpu-event-timeout-ms). The
// same holds for the server's internal writers (an L2 load into its buffers,
// which ends when the adapter call returns). A worker's own staged copy
// (Owner::Instance: it writes through its mapping of the pool) does expire,
// but its memory is *quarantined*, not freed: reused only once the worker's
// registration is released (ReleaseOwner), since nothing can stop a late
// write of a worker that is slow rather than gone.
//
// Every operation is atomic: it examines and changes all its keys under the
// mutexes of all shards they live in, taken in ascending shard order.
//
// Thread-safety: internally synchronised; every method may be called from any
// thread. Lock order: shard mutexes (ascending index) -> eviction policy mutex
// -> allocator mutex. The lease registry's mutex is a leaf taken with no shard
// mutex held. The policy and the allocator never call back in.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
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
#include "store/lease_registry.h"
#include "store/listener.h"
#include "store/object_key.h"
#include "store/object_shard.h"
#include "store/owner.h"
#include "store/slot_journal.h"
#include "store/read_locks.h"
#include "store/store_stats.h"
#include "store/tenant_ledger.h"

namespace lmcache::store {

using alloc::Offset;

struct ObjectTableConfig {
  TimeMs write_ttl_ms = 600'000;   // --l1-write-ttl-seconds (600 s)
  TimeMs read_ttl_ms = 300'000;    // --l1-read-ttl-seconds (300 s)
  std::uint32_t num_shards = 64;   // > 0
  bool on_demand_eviction = true;  // evict LRU objects when a reservation cannot allocate
  // While the pool is still being pre-faulted, a reservation that finds no
  // memory waits up to this long for fresh pages before it evicts or fails.
  std::chrono::milliseconds prefault_wait{30'000};
  // --quota-mode: how tenants' bytes are counted and capped (tenant_ledger.h).
  QuotaMode quota_mode = QuotaMode::kOpen;
  // --max-pinned-fraction: pinned objects may take at most this fraction of the pool.
  double max_pinned_fraction = 0.5;
};

// How ReserveWrite allocates the keys that need memory.
enum class AllocationMode {
  kAllOrNothing,   // every key gets memory, or none does
  kLongestPrefix,  // as many keys as fit, in batch order
};

// What a reservation does when the pool is still being pre-faulted and the
// batch does not fit in the pages made ready so far.
enum class WhilePoolWarms : std::uint8_t {
  kWait,        // wait up to prefault_wait for fresh pages (a thread of its own may)
  kReportBusy,  // reserve nothing and say so (WriteLease::pages_pending): the caller parks
  kGoOn,        // evict, or take what fits, now (the caller's wait ended)
};

enum class WriteReservation : std::uint8_t {
  kReserved,         // staged under the returned lease
  kAlreadyResident,  // skipped: the key is cached already
  kOutOfMemory,      // skipped: no memory even after eviction
};

// What ReserveWrite staged. `lease` covers every kReserved key (kNoLease when
// none was reserved) and is finished or aborted as a whole.
struct WriteLease {
  LeaseId lease = kNoLease;
  std::vector<WriteReservation> outcomes;  // one per key
  std::vector<Offset> offsets;             // valid where outcomes[i] == kReserved
  std::size_t reserved = 0;
  std::size_t out_of_memory = 0;
  // Of them, refused because their tenant is at its quota with nothing of
  // its own left to evict (tenant_ledger.h).
  std::size_t over_quota = 0;
  // WhilePoolWarms::kReportBusy only: the batch must wait for pre-faulted
  // pages, so nothing was reserved (lease kNoLease). The caller waits for
  // NotifyWhenPagesReady(ready_bytes_seen) and tries again.
  bool pages_pending = false;
  std::uint64_t ready_bytes_seen = 0;
};

enum class WriteOutcome : std::uint8_t {
  kAdmitted,            // now resident and readable
  kDuplicateDiscarded,  // another writer admitted it first; this copy was freed
  kNotStaged,           // this lease has no staged copy (re-reserved, deleted or reclaimed)
  kLeaseExpired,        // the write lease ran out; the copy was freed
};

struct WriteCompletion {
  std::vector<ObjectKey> keys;  // the lease's keys, in reservation order
  std::vector<WriteOutcome> outcomes;
  std::size_t admitted = 0;
  std::size_t lost = 0;  // kNotStaged + kLeaseExpired
};

enum class ReadMode {
  kAllOrNothing,  // every key, or none
  kPrefix,        // the leading run of complete groups
};

struct ReadRequest {
  std::span<const ObjectKey> keys;
  Owner owner;
  std::uint32_t count = 1;  // locks per key, 1..128
  ReadMode mode = ReadMode::kAllOrNothing;
  // Keys per group (the ranks of one chunk): a group is granted only when all
  // its keys are resident, so a partial chunk is never locked.
  std::size_t group = 1;
  // Leases to consume one lock per key from (first that holds one), instead
  // of locking afresh: a worker taking over its share of a lookup's locks.
  std::span<const LeaseId> consume;
  // kAllOrNothing only: when a key is missing, still release one lock per
  // present key from `consume` (a failed retrieve gives its share back).
  bool release_share_on_miss = false;
  // Adds the locks to this lease of `owner` (one lookup locking its prompt
  // window by window) instead of a new one.
  LeaseId extend = kNoLease;
};

struct ReadGrant {
  bool granted = false;
  Offset offset = 0;
  std::uint64_t size = 0;
};

struct ReadAcquisition {
  LeaseId lease = kNoLease;       // kNoLease when nothing was granted
  std::size_t granted = 0;        // leading keys granted (whole groups; kAllOrNothing: 0 or all)
  std::size_t missing = 0;        // kAllOrNothing: keys not resident
  std::size_t consumed = 0;       // locks taken over from `consume`
  std::vector<ReadGrant> grants;  // one per key
};

enum class DeleteOutcome : std::uint8_t { kDeleted, kLocked, kNotFound };

enum class ObjectState : std::uint8_t { kResident, kStaging };
struct ObjectInfo {
  ObjectState state = ObjectState::kResident;
  Offset offset = 0;
  std::uint64_t size = 0;
  std::uint32_t read_locks = 0;  // live read locks of all leases (resident only)
  std::size_t read_leases = 0;   // leases holding them
};

struct ListedObject {
  ObjectKey key;
  std::uint64_t size_bytes = 0;  // as the writer asked (the slot's length)
  std::uint32_t pins = 0;
};

struct OwnerReleaseReport {
  std::uint64_t read_locks_released = 0;
  std::uint64_t writes_aborted = 0;
  std::uint64_t quarantine_released = 0;  // expired copies it might still have written
};

struct EvictionReport {
  std::uint64_t objects = 0;
  std::uint64_t bytes = 0;  // aligned bytes returned to the allocator
};

// The table as a successor server adopts it in place (warm restart,
// docs/architecture.md "Restarts and upgrades"). Resident objects come in
// eviction order, oldest first. `held` is memory the predecessor had lent to
// writers (staged copies, quarantined and retired ones): a worker may still
// be copying into it, so the successor keeps it from reuse for a write TTL
// (or, for a slot an earlier recovery held, until that hold ends).
struct AdoptedObject {
  ObjectKey key;
  Offset offset = 0;
  std::uint64_t size = 0;
  // A reader held it at the handover (a lookup's locks, a worker copying out
  // of it): the successor keeps it from eviction for a read TTL.
  bool read_locked = false;
  // Its bytes' checksum, where a crash recovery verified it: the successor's
  // journal records it sealed at once (not carried by a takeover's image).
  std::optional<std::uint64_t> checksum;
};
struct HeldSlot {
  Offset offset = 0;
  std::uint64_t size = 0;
  // Held until then (the table's clock) by a recovery before: a successor
  // keeps it no longer (at most a write TTL). 0: a write TTL from adoption.
  TimeMs held_until_ms = 0;
};
struct TableImage {
  std::vector<AdoptedObject> resident;
  std::vector<HeldSlot> held;
};
struct AdoptionReport {
  std::uint64_t objects = 0;  // resident again, in the predecessor's eviction order
  std::uint64_t bytes = 0;
  std::uint64_t read_locked = 0;  // of them, kept from eviction for a read TTL
  std::uint64_t held_slots = 0;   // kept from reuse for a write TTL
  std::uint64_t held_bytes = 0;
  std::uint64_t holds_ended = 0;  // held by an earlier recovery until a time now past: freed
};

class ObjectTable {
 public:
  // `allocator`, `policy` and `clock` must outlive the table.
  ObjectTable(alloc::SlabAllocator* allocator, EvictionPolicy* policy, const Clock* clock,
              const ObjectTableConfig& config);
  ~ObjectTable();
  ObjectTable(const ObjectTable&) = delete;
  ObjectTable& operator=(const ObjectTable&) = delete;

  // --- writes ---
  // Stages every key that is not resident, all with `size` bytes, under one
  // new write lease of `owner`. A key `owner` staged already (same size) is
  // handed back and moves to the new lease. Keys must be valid and distinct.
  // Errors only for invalid input. `warming` says what to do when the batch
  // needs pages the pre-faulter has not made ready yet.
  Result<WriteLease> ReserveWrite(std::span<const ObjectKey> keys, std::uint64_t size, Owner owner,
                                  AllocationMode mode,
                                  WhilePoolWarms warming = WhilePoolWarms::kWait);
  // The same, the lease's record taking `keys` over when every key is
  // staged (no copy: at chunk size 1 a prompt's 32768 keys are 5 MB).
  Result<WriteLease> ReserveWrite(std::vector<ObjectKey>&& keys, std::uint64_t size, Owner owner,
                                  AllocationMode mode,
                                  WhilePoolWarms warming = WhilePoolWarms::kWait);
  // Calls `wake` once more pages than `seen` bytes are ready, or the pool
  // stops growing (at once if so already; else on the pre-faulter's thread).
  void NotifyWhenPagesReady(std::uint64_t seen, std::function<void()> wake);
  // How long a reservation waits for pre-faulted pages before it evicts.
  std::chrono::milliseconds prefault_wait() const { return config_.prefault_wait; }
  // Admits every copy the lease staged; the lease ends.
  WriteCompletion FinishWrite(LeaseId write_lease);
  // Admits the lease's copies and read-locks each admitted (or, where another
  // writer won, already resident) object `count` times under a new read lease
  // of `reader`, atomically: eviction cannot slip in between (an L2 load
  // landing for its lookup). `grants` follow the lease's keys; `granted`
  // counts the keys locked.
  Result<ReadAcquisition> FinishWriteAndRead(LeaseId write_lease, Owner reader,
                                             std::uint32_t count);
  // The same for `keys`, in their order (grants follow them): the lease's
  // copies of `keys` are admitted, its other copies freed (a load that ended
  // early), and every key of `keys` resident then is locked, whether this
  // lease, another writer, or a load that landed before the reservation put it
  // there (an L2 hit another prefetch brought in meanwhile stays a hit).
  // `write_lease` may be kNoLease: nothing was staged, only locks are taken.
  // Where `served_once[i]` (empty: none), the copy admitted for `keys[i]` is
  // served once: read like any object while locked, heard of by no listener,
  // never evicted, freed when its last lock is released or expires.
  Result<ReadAcquisition> FinishWriteAndRead(LeaseId write_lease, Owner reader, std::uint32_t count,
                                             std::span<const ObjectKey> keys,
                                             const std::vector<bool>& served_once = {});
  // Drops the lease's staged copies; returns how many.
  std::size_t AbortWrite(LeaseId write_lease);

  // --- reads ---
  Result<ReadAcquisition> AcquireRead(const ReadRequest& request);
  // Releases up to `count` locks of `read_lease` on each of `keys`; returns
  // how many. The lease stays registered (other keys may still be held).
  std::uint64_t ReleaseRead(LeaseId read_lease, std::span<const ObjectKey> keys,
                            std::uint32_t count = kMaxReadLockCount);
  // Releases everything left of the lease; the lease ends. Returns the locks released.
  std::uint64_t ReleaseRead(LeaseId read_lease);

  // Ends every lease of `owner`: read locks released, staged copies dropped,
  // its quarantined copies freed.
  OwnerReleaseReport ReleaseOwner(const Owner& owner);

  // --- maintenance ---
  // Deletes resident and staged copies. Without `force`, a key with a live
  // lease is left alone (kLocked); with it, locked copies are retired.
  std::vector<DeleteOutcome> Delete(std::span<const ObjectKey> keys, bool force);
  // Deletes every object (every unlocked one unless `force`). Returns how many went.
  std::uint64_t Clear(bool force);
  // Marks resident keys as recently used.
  void Touch(std::span<const ObjectKey> keys);
  // Evicts unlocked resident objects in policy order until `bytes` are freed
  // or no candidate is left.
  EvictionReport EvictLru(std::uint64_t bytes);
  // The same among tenant `salt`'s objects only (counted as its quota's evictions).
  EvictionReport EvictTenant(std::string_view salt, std::uint64_t bytes);
  // Reorders one round's candidates: `window` holds the policy's oldest
  // (oldest first, with their last uses), `resident` the objects the
  // policy orders; it answers the same keys in the order to evict them.
  using CandidateOrder = std::function<std::vector<ObjectKey>(
      std::span<const UsedCandidate> window, std::size_t resident)>;
  // EvictLru with candidates chosen in the order `order` gives them (the
  // evictor's last-copy bias). A round's window is the policy's oldest
  // candidates: twice as many as `bytes` takes at the average object size
  // plus kMinReorderWindow, at most `max_window`. A round evicts (up to
  // `bytes`) from the first half of its window in that order; the rest
  // stays oldest and is in the next round's window again, with the
  // next-oldest. So each object a pass evicts is chosen among about twice
  // as many candidates, however large the pass, and an order that changes
  // nothing is plain LRU. The keys evicted are appended to `evicted` when
  // given.
  static constexpr std::size_t kMinReorderWindow = 256;
  static constexpr std::size_t kMaxReorderWindow = std::size_t{1} << 16;
  EvictionReport EvictReordered(std::uint64_t bytes, const CandidateOrder& order,
                                std::vector<ObjectKey>* evicted = nullptr,
                                std::size_t max_window = kMaxReorderWindow);
  // The window EvictReordered takes for `bytes` of `used_bytes` held by
  // `resident` objects.
  static std::size_t ReorderWindow(std::uint64_t bytes, std::uint64_t used_bytes,
                                   std::size_t resident);

  // --- quotas (tenant_ledger.h) ---
  // Caps tenant `salt` at `bytes` and evicts its oldest unlocked objects
  // beyond it at once (what is locked goes at a later TrimOverQuota).
  // kWrongState when quotas are off.
  Status SetQuota(std::string_view salt, std::uint64_t bytes);
  // False when `salt` had no quota.
  bool RemoveQuota(std::string_view salt) { return ledger_.RemoveLimit(salt); }
  // Evicts every tenant's objects beyond its quota (the evictor's pass).
  EvictionReport TrimOverQuota();
  const TenantLedger& tenants() const { return ledger_; }
  // Frees staging copies whose write lease expired (a worker's are
  // quarantined instead, until ReleaseOwner of the worker) and retired objects
  // whose leases ended, and forgets expired lease records. Returns objects freed.
  std::uint64_t ReclaimExpired();

  // --- handover (object_table_handover.cc) ---
  // Everything a successor adopts, shard by shard (each object in one state;
  // the caller has stopped the traffic and every writer of the pool before).
  TableImage Export() const;
  // Admits `image` into this fresh table whose allocator has adopted the
  // same offsets (SlabAllocator::Adopt): no byte is copied, no listener is
  // told (the objects are not new). Refuses invalid or duplicate keys and a
  // size that does not match its slot; the table must then be discarded.
  Result<AdoptionReport> Adopt(const TableImage& image);

  std::optional<ObjectInfo> Find(const ObjectKey& key) const;
  // Up to `limit` resident objects that `keep` accepts (null: every one),
  // in listing order (shard by shard, then ListingLess within a shard),
  // after `after` (null: from the first). An object resident throughout a
  // walk of pages is listed exactly once. Costs one pass over the shards
  // it reads, each locked on its own: a page never stops the table.
  // With `pinned_only`, only objects with a pin.
  std::vector<ListedObject> ListResident(const ObjectKey* after, std::size_t limit,
                                         const std::function<bool(const ObjectKey&)>& keep,
                                         bool pinned_only = false) const;

  // --- pins (POST and DELETE /cache/pins) ---
  // Adds one pin to each resident key: a pinned object is never evicted (by
  // the watermark, on demand or for its tenant's quota) until its last pin
  // goes; an explicit Delete or Clear still removes it, pins and all. The
  // first pin of an object is refused (kOverLimit) when it would take the
  // pinned bytes past max_pinned_fraction of the pool. Pins live with the
  // process: a restart's successor starts with none.
  std::vector<PinOutcome> Pin(std::span<const ObjectKey> keys);
  std::vector<UnpinOutcome> Unpin(std::span<const ObjectKey> keys);
  std::uint64_t pinned_limit_bytes() const { return shard_context_.pinned_limit_bytes; }
  TableStats Stats() const;

  // The bytes at `offset` of a grant the caller holds (a ReadGrant, or a
  // buffer of its WriteLease), for in-process copies (the L2 controllers):
  // an error if the range is not inside the pool. The lease, not this call,
  // keeps them valid.
  Result<std::span<std::byte>> LeasedBytes(Offset offset, std::uint64_t size) const;
  // The whole pool every lease's bytes lie in: for a device that registers
  // memory once (an L2 adapter's AttachMemory), never to read or write.
  std::span<std::byte> PoolBytes() const;

  // Records every slot lent, object admitted and slot freed in `journal`
  // (--recover-pool), before anyone can act on it. Before the table is used;
  // it must outlive the table.
  void SetJournal(SlotJournal* journal) {
    journal_ = journal;
    shard_context_.journal = journal;
  }
  SlotJournal* journal() const { return journal_; }

  // Subscribes `listener` (listener.h). Before the table is used; it must outlive the table.
  void AddListener(StoreListener* listener) { listeners_.push_back(listener); }

  alloc::SlabAllocator& allocator() const { return *allocator_; }
  const ObjectTableConfig& config() const { return config_; }

 private:
  class ShardSetLock;

  std::uint32_t ShardIndex(const ObjectKey& key) const;
  std::uint32_t num_shards() const;
  // Lease lifetimes by owner: a device owner's leases never expire (see the
  // class comment), everyone else's run for the configured TTL.
  TimeMs WriteTtl(const Owner& owner) const;
  TimeMs ReadTtl(const Owner& owner) const;
  Status ValidateKeys(std::span<const ObjectKey> keys, bool require_distinct) const;
  // Evicts candidates `next_candidates(skip)` hands out until `bytes` are freed.
  // The keys evicted are appended to `evicted` when given.
  EvictionReport EvictFrom(
      const std::function<std::vector<ObjectKey>(std::size_t skip)>& next_candidates,
      std::uint64_t bytes, std::vector<ObjectKey>* evicted_keys = nullptr);
  // One batch of a round, under its shards' locks, until `report` reaches
  // `bytes`; counts the locked candidates in `skip`.
  void EvictBatch(std::span<const ObjectKey> batch, std::uint64_t bytes, EvictionReport* report,
                  std::size_t* skip, std::vector<ObjectKey>* evicted_keys);
  // The keys of `needs_memory` (indices into `keys`) whose tenants have room
  // for them, after each tenant short of room evicted its own oldest
  // objects; kLongestPrefix keeps a tenant's keys up to its first refused
  // one, kAllOrNothing none if any is refused. Counts the rest in `result`.
  std::vector<std::size_t> FitToQuotas(std::span<const ObjectKey> keys, std::uint64_t size,
                                       std::vector<std::size_t> needs_memory, AllocationMode mode,
                                       WriteLease* result);
  // Allocates up to `count` objects, evicting on demand; fewer than `count`
  // only in kLongestPrefix mode.
  // Sets *pages_pending (and allocates nothing) when `warming` is
  // kReportBusy and the batch must wait for pre-faulted pages.
  Result<std::vector<Offset>> AllocateWithEviction(std::uint64_t size, std::size_t count,
                                                   AllocationMode mode, WhilePoolWarms warming,
                                                   bool* pages_pending);
  // ReserveWrite's body; `movable`, when given, holds `keys` and may be
  // moved into the lease's record.
  Result<WriteLease> ReserveWriteOf(std::span<const ObjectKey> keys,
                                    std::vector<ObjectKey>* movable, std::uint64_t size,
                                    Owner owner, AllocationMode mode, WhilePoolWarms warming);
  // One pass of a reservation over `keys` under their shard locks: each key
  // not yet decided in `result` is offered `offered[j]` for its j-th place in
  // `pending` (none in the first pass). Returns the keys still needing memory.
  std::vector<std::size_t> ReservePass(std::span<const ObjectKey> keys, std::uint64_t size,
                                       const Owner& owner, LeaseId lease,
                                       std::span<const std::size_t> pending,
                                       std::span<const Offset> offered, WriteLease* result);
  // Releases one lock of the first of `request.consume` that holds one on
  // each resident key of `entries` (their shards locked by `lock`, built
  // from `request.keys`); what that frees goes to `to_free`.
  void GiveBackShares(const ShardSetLock& lock, const ReadRequest& request,
                      const std::vector<ResidentEntry*>& entries, TimeMs now,
                      std::vector<Offset>* to_free);
  // Releases up to `count` locks of `lease` on the keys (their shards locked
  // by `lock`, built from the same keys).
  std::uint64_t ReleaseLocked(const ShardSetLock& lock, LeaseId lease,
                              std::span<const ObjectKey> keys, std::uint32_t count, TimeMs now,
                              std::vector<Offset>* to_free);
  // Drops the staged copies of `write_lease` among `keys` (its record already taken).
  std::size_t AbortStaged(LeaseId write_lease, std::span<const ObjectKey> keys);
  // Tell the listeners (with no shard lock held).
  void NotifyAdmitted(std::span<const ObjectKey> keys, const std::vector<std::uint64_t>& bytes,
                      AdmissionSource source) const;
  void NotifyEvicted(const std::vector<ObjectKey>& keys,
                     const std::vector<std::uint64_t>& bytes) const;
  void NotifyDeleted(const std::vector<ObjectKey>& keys,
                     const std::vector<std::uint64_t>& bytes) const;

  alloc::SlabAllocator* const allocator_;
  EvictionPolicy* const policy_;
  const Clock* const clock_;
  const ObjectTableConfig config_;
  TenantLedger ledger_;  // before the shards, which charge it
  ShardContext shard_context_;
  std::vector<std::unique_ptr<ObjectShard>> shards_;
  mutable LeaseRegistry leases_;
  std::vector<StoreListener*> listeners_;
  SlotJournal* journal_ = nullptr;

  TableCounters counters_;  // the table's kCounter figures
  std::atomic<std::uint64_t> quarantined_objects_{0};  // lets ReleaseOwner skip the sweep
  std::atomic<std::uint64_t> pinned_bytes_{0};         // ShardContext::pinned_bytes
};

}  // namespace lmcache::store
