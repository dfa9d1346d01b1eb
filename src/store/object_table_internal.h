// Private parts of ObjectTable shared by its two source files: the shard and
// the multi-shard lock. Not for use outside src/store/object_table*.cc.
//
// Thread-safety: every field of a Shard is guarded by that shard's `mu`.
#pragma once

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "store/object_table.h"

namespace lmcache::store {

struct ResidentEntry {
  Offset offset = 0;
  std::uint64_t size = 0;  // bytes the writer asked for (slot length); memory is size aligned up
  ReadLease lease;
};

struct StagedEntry {
  OwnerId owner = 0;
  Offset offset = 0;
  std::uint64_t size = 0;
  TimeMs expires_ms = 0;  // write lease
};

// A copy removed from the index by a forced delete while a lease still held it.
// Its memory is freed once the lease ends (released or expired).
struct RetiredEntry {
  ObjectKey key;
  Offset offset = 0;
  std::uint64_t size = 0;
  bool staged = false;    // a writer's copy (write lease) rather than a resident one
  OwnerId writer = 0;     // staged only
  TimeMs expires_ms = 0;  // staged only
  ReadLease lease;        // resident only
  bool Ended(TimeMs now) const { return staged ? now >= expires_ms : !lease.IsLocked(now); }
};

struct ObjectTable::Shard {
  Mutex mu;
  std::unordered_map<ObjectKey, ResidentEntry, ObjectKeyHash> resident;
  std::unordered_map<ObjectKey, std::vector<StagedEntry>, ObjectKeyHash> staging;
  std::vector<RetiredEntry> retired;
};

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

}  // namespace lmcache::store
