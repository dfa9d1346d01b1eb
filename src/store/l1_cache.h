// L1Cache: the assembled L1 tier: pool segment, allocator, policy, object
// table and evictor, built in dependency order and torn down in reverse.
//
// Create() fails fast (never falls back) when the segment cannot be made: a
// short /dev/shm is reported with the sizes and the fix. The segment is
// pre-faulted before Create() returns, so no request pays page faults, and it
// is unlinked when the L1Cache is destroyed.
//
// Thread-safety: after Create() the components are internally synchronised;
// Create() and destruction belong to the controlling (main) thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "alloc/slab_allocator.h"
#include "common/clock.h"
#include "lmcache/status.h"
#include "shm/shm_segment.h"
#include "store/eviction_policy.h"
#include "store/evictor.h"
#include "store/flow_counters.h"
#include "store/object_table.h"

namespace lmcache::store {

struct L1Config {
  std::string shm_name;           // normalised segment name
  std::uint64_t size_bytes = 0;   // pool size
  unsigned prefault_threads = 0;  // 0 = one per core
  std::string eviction_policy = "LRU";
  alloc::SlabAllocatorConfig allocator;
  ObjectTableConfig table;
  EvictorConfig evictor;
  // False: the evictor's thread never runs (tests that evict explicitly);
  // admissions over the trigger then nudge nothing.
  bool background_eviction = true;
  std::string shm_dir = "/dev/shm";
};

class L1Cache {
 public:
  // `policy`, when given, replaces the one config.eviction_policy names (tests).
  static Result<std::unique_ptr<L1Cache>> Create(const L1Config& config, const Clock* clock,
                                                 std::unique_ptr<EvictionPolicy> policy = nullptr);
  ~L1Cache();
  L1Cache(const L1Cache&) = delete;
  L1Cache& operator=(const L1Cache&) = delete;

  shm::ShmSegment& segment() { return *segment_; }
  alloc::SlabAllocator& allocator() { return *allocator_; }
  ObjectTable& table() { return *table_; }
  Evictor& evictor() { return *evictor_; }
  FlowStats flow() const { return flow_.Snapshot(); }
  const shm::PrefaultReport& prefault_report() const { return prefault_; }

 private:
  L1Cache() = default;

  std::unique_ptr<shm::ShmSegment> segment_;
  std::unique_ptr<alloc::SlabAllocator> allocator_;
  std::unique_ptr<EvictionPolicy> policy_;
  FlowCounters flow_;  // declared before the table, so it outlives it
  std::unique_ptr<ObjectTable> table_;
  std::unique_ptr<Evictor> evictor_;
  shm::PrefaultReport prefault_;
};

}  // namespace lmcache::store
