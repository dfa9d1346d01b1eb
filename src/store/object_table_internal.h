// Private parts of ObjectTable shared by its source files: the multi-shard
// lock and the deferred free. Not for use outside src/store/object_table*.cc.
//
// Thread-safety: the shards of an operation are locked as a set
// (ShardSetLock), which the clang analysis cannot follow, so code that calls
// a shard's ...Locked methods first calls `shard.AssertHeld()`: the analysis
// then checks every call, and builds without NDEBUG check at run time that
// the calling thread holds the mutex.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "common/check.h"
#include "store/object_shard.h"
#include "store/object_table.h"

namespace lmcache::store {

// Locks the shards of a set of keys in ascending index order (deadlock-free
// against any other ShardSetLock) and unlocks them on destruction. Built from
// keys, it remembers each key's shard, so a batch hashes each key for its
// shard once (ShardOf(i)), not once per pass.
class ObjectTable::ShardSetLock {
 public:
  ShardSetLock(const ObjectTable& table,
               std::span<const ObjectKey> keys) LMC_NO_THREAD_SAFETY_ANALYSIS : table_(table) {
    // Marks, then collects in order: a batch of many keys (one per token at
    // chunk size 1) costs a pass over the keys and one over the shards, no sort.
    std::vector<bool> named(table.num_shards(), false);
    key_shards_.reserve(keys.size());
    for (const ObjectKey& key : keys) {
      key_shards_.push_back(table.ShardIndex(key));
      named[key_shards_.back()] = true;
    }
    for (std::uint32_t i = 0; i < named.size(); ++i) {
      if (named[i]) indices_.push_back(i);
    }
    for (const std::uint32_t i : indices_) table_.shards_[i]->Lock();
  }
  ShardSetLock(const ObjectTable& table, std::uint32_t index) LMC_NO_THREAD_SAFETY_ANALYSIS
      : table_(table),
        indices_{index} {
    table_.shards_[index]->Lock();
  }
  ~ShardSetLock() LMC_NO_THREAD_SAFETY_ANALYSIS {
    for (auto it = indices_.rbegin(); it != indices_.rend(); ++it) table_.shards_[*it]->Unlock();
  }
  ShardSetLock(const ShardSetLock&) = delete;
  ShardSetLock& operator=(const ShardSetLock&) = delete;

  // The shard of the `key_index`th key this lock was built from (locked).
  ObjectShard& ShardOf(std::size_t key_index) const {
    LMC_DCHECK(key_index < key_shards_.size());
    return *table_.shards_[key_shards_[key_index]];
  }
  // How many keys it was built from (0 when built from a shard number).
  std::size_t key_count() const { return key_shards_.size(); }

 private:
  const ObjectTable& table_;
  std::vector<std::uint32_t> indices_;
  std::vector<std::uint32_t> key_shards_;  // by key, when built from keys
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
