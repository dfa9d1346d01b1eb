// Private parts of ObjectTable shared by its source files: the entries, the
// shard and the multi-shard lock. Not for use outside src/store/object_table*.cc.
//
// Thread-safety: every field of a Shard is guarded by that shard's `mu`. The
// shards of an operation are locked as a set (ShardSetLock), which the clang
// analysis cannot follow, so code that touches a shard first calls
// `shard.mu.AssertHeld()`: the analysis then checks every access, and builds
// without NDEBUG check at run time that the calling thread holds the mutex.
#pragma once

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "store/object_table.h"

namespace lmcache::store {

struct ResidentEntry {
  Offset offset = 0;
  std::uint64_t size = 0;  // bytes the writer asked for (slot length); memory is size aligned up
  ReadLocks locks;
  // Its links in its shard's list of lock holders (Shard::holders): entries
  // of an unordered_map never move, and linking costs no hashing and no
  // allocation on the read path.
  ResidentEntry* holder_prev = nullptr;
  ResidentEntry* holder_next = nullptr;
  bool holder = false;
};

struct StagedEntry {
  LeaseId lease = kNoLease;  // the write lease the copy belongs to
  Owner owner;
  Offset offset = 0;
  std::uint64_t size = 0;
  TimeMs expires_ms = 0;  // write lease
};

// A copy removed from the index by a forced delete while a lease still held it.
// Its memory is freed once the lease ends (released, finished or expired).
// Or a quarantined one: a staged copy whose write lease expired while its
// writer (a worker's registration, which maps the pool and copies into it
// itself) may still be writing. Its memory is freed only once the writer is
// released (ReleaseOwner: it unregistered, its connection closed, it was
// reaped or replaced), never by time, so a late write cannot land in memory
// handed to another object.
struct RetiredEntry {
  ObjectKey key;
  Offset offset = 0;
  std::uint64_t size = 0;
  bool staged = false;             // a writer's copy (write lease) rather than a resident one
  bool quarantined = false;        // staged only: until its writer is released
  LeaseId write_lease = kNoLease;  // staged only
  Owner writer;                    // staged only
  TimeMs expires_ms = 0;           // staged only
  ReadLocks locks;                 // resident only
  bool Ended(TimeMs now) const {
    if (quarantined) return false;
    return staged ? now >= expires_ms : !locks.IsLocked(now);
  }
};

using StagingMap = std::unordered_map<ObjectKey, std::vector<StagedEntry>, ObjectKeyHash>;

struct ObjectTable::Shard {
  Mutex mu;
  std::unordered_map<ObjectKey, ResidentEntry, ObjectKeyHash> resident LMC_GUARDED_BY(mu);
  StagingMap staging LMC_GUARDED_BY(mu);
  std::vector<RetiredEntry> retired LMC_GUARDED_BY(mu);
  // What Stats reads instead of walking every resident object (a walk took
  // 49 ms at 157k objects, under the shard locks, on every scrape): their
  // aligned bytes, kept as entries come and go, and the entries given a read
  // lock and not seen unlocked by Stats since, a superset of the locked ones,
  // as an intrusive list (membership costs no memory beyond the entry's links,
  // and linking touches only the entry and the list's head).
  std::uint64_t resident_bytes LMC_GUARDED_BY(mu) = 0;
  ResidentEntry* holders LMC_GUARDED_BY(mu) = nullptr;

  // Links `entry` into `holders` (it was just read-locked); idempotent.
  void AddHolder(ResidentEntry* entry) LMC_REQUIRES(mu) {
    if (entry->holder) return;
    entry->holder = true;
    entry->holder_prev = nullptr;
    entry->holder_next = holders;
    if (holders != nullptr) holders->holder_prev = entry;
    holders = entry;
  }
  // Unlinks `entry` if linked (unlocked now, or leaving the map).
  void RemoveHolder(ResidentEntry* entry) LMC_REQUIRES(mu) {
    if (!entry->holder) return;
    entry->holder = false;
    if (entry->holder_prev != nullptr) {
      entry->holder_prev->holder_next = entry->holder_next;
    } else {
      holders = entry->holder_next;
    }
    if (entry->holder_next != nullptr) entry->holder_next->holder_prev = entry->holder_prev;
    entry->holder_prev = entry->holder_next = nullptr;
  }
};

inline auto ObjectTable::AdmitResident(Shard& shard, const ObjectKey& key, Offset offset,
                                       std::uint64_t size, bool journaled) {
  shard.mu.AssertHeld();
  shard.resident_bytes += allocator_->AlignedSize(size);
  // Recorded before any reader can learn of it (the shard is locked).
  if (journaled && journal_ != nullptr) journal_->Committed(key, offset, size);
  return shard.resident.emplace(key, ResidentEntry{offset, size, {}, nullptr, nullptr, false})
      .first;
}

template <typename ResidentIterator>
void ObjectTable::EraseResident(Shard& shard, ResidentIterator it) {
  shard.mu.AssertHeld();
  // Out of the index, never to be recovered (a lease may still read it).
  if (journal_ != nullptr) journal_->Withdrawn(it->second.offset);
  shard.resident_bytes -= allocator_->AlignedSize(it->second.size);
  shard.RemoveHolder(&it->second);
  shard.resident.erase(it);
}

// Locks the shards of a set of keys in ascending index order (deadlock-free
// against any other ShardSetLock) and unlocks them on destruction.
class ObjectTable::ShardSetLock {
 public:
  ShardSetLock(const ObjectTable& table,
               std::span<const ObjectKey> keys) LMC_NO_THREAD_SAFETY_ANALYSIS : table_(table) {
    indices_.reserve(keys.size());
    for (const ObjectKey& key : keys) indices_.push_back(table.ShardIndex(key));
    std::sort(indices_.begin(), indices_.end());
    indices_.erase(std::unique(indices_.begin(), indices_.end()), indices_.end());
    for (const std::uint32_t i : indices_) table_.shards_[i].mu.Lock();
  }
  ShardSetLock(const ObjectTable& table, std::uint32_t index) LMC_NO_THREAD_SAFETY_ANALYSIS
      : table_(table),
        indices_{index} {
    table_.shards_[index].mu.Lock();
  }
  ~ShardSetLock() LMC_NO_THREAD_SAFETY_ANALYSIS {
    for (auto it = indices_.rbegin(); it != indices_.rend(); ++it) table_.shards_[*it].mu.Unlock();
  }
  ShardSetLock(const ShardSetLock&) = delete;
  ShardSetLock& operator=(const ShardSetLock&) = delete;

 private:
  const ObjectTable& table_;
  std::vector<std::uint32_t> indices_;
};

// Frees the offsets collected under shard locks once the locks are gone: the
// allocator is a leaf, but freeing outside the shard locks keeps them short.
// Declare it before the ShardSetLock so it runs after the unlock.
class DeferredFree {
 public:
  explicit DeferredFree(const ObjectTable& table) : table_(table) {}
  ~DeferredFree();
  DeferredFree(const DeferredFree&) = delete;
  DeferredFree& operator=(const DeferredFree&) = delete;
  void Add(Offset offset) { offsets_.push_back(offset); }
  std::vector<Offset>* list() { return &offsets_; }
  std::size_t size() const { return offsets_.size(); }

 private:
  const ObjectTable& table_;
  std::vector<Offset> offsets_;
};

}  // namespace lmcache::store
