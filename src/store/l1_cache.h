// L1Cache: the assembled L1 tier: pool segment, allocator, policy, object
// table and evictor, built in dependency order and torn down in reverse.
//
// Create() fails fast (never falls back) when the segment cannot be made: a
// short /dev/shm is reported with the sizes and the fix. The segment is
// pre-faulted in the background (or, with background_prefault off, before
// Create() returns): the allocator hands out only pages already faulted in,
// in address order as the prefaulter advances, so the server serves at once
// whatever the pool size and no store ever copies into an untouched page (a
// store that finds no faulted page free waits for the next ones). The
// segment is unlinked when the L1Cache is destroyed.
//
// Thread-safety: after Create() the components are internally synchronised;
// prefault() may be read from any thread; Create() and destruction belong to
// the controlling (main) thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "alloc/slab_allocator.h"
#include "common/clock.h"
#include "lmcache/status.h"
#include "shm/huge_pages.h"
#include "shm/shm_segment.h"
#include "store/eviction_policy.h"
#include "store/evictor.h"
#include "store/flow_counters.h"
#include "store/object_table.h"
#include "store/pool_image.h"
#include "store/slot_journal.h"
#include "store/store_stats.h"

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
  // False: the whole pool is pre-faulted before Create() returns.
  bool background_prefault = true;
  std::uint64_t prefault_step_bytes = 256ull << 20;  // made usable step by step
  // Tests only: called on the pre-faulter's thread before each step with the
  // bytes made usable so far; it may block to hold the pool part-ready (it
  // must return once the cache is being destroyed).
  std::function<void(std::uint64_t ready_bytes)> before_prefault_step;
  std::string shm_dir = "/dev/shm";
  shm::HugePageMode huge_pages = shm::HugePageMode::kAuto;
  // Tenants' quotas from the start (--quota SALT=GB; more are set at run time).
  std::vector<std::pair<std::string, std::uint64_t>> quotas;
  // Makes the pool's slot journal once the segment exists (--recover-pool:
  // restart/pool_journal.h); empty, the pool is journaled nowhere.
  SlotJournalFactory journal;
};

// The geometry a pool of `config` is laid out with.
PoolGeometry GeometryOf(const L1Config& config);

class L1Cache {
 public:
  // `policy`, when given, replaces the one config.eviction_policy names (tests).
  static Result<std::unique_ptr<L1Cache>> Create(const L1Config& config, const Clock* clock,
                                                 std::unique_ptr<EvictionPolicy> policy = nullptr);
  // A pool someone else built, adopted in place (a takeover's segment from
  // its predecessor, a recovery's reopened after a crash): `segment`, not yet
  // owning its name, with the objects and held slots of `image`; pre-faulting
  // goes on from where the image stopped. The name is claimed on success;
  // on failure the segment is left to its owner.
  static Result<std::unique_ptr<L1Cache>> Adopt(const L1Config& config, const Clock* clock,
                                                std::unique_ptr<shm::ShmSegment> segment,
                                                const PoolImage& image, AdoptionReport* report);
  ~L1Cache();
  L1Cache(const L1Cache&) = delete;
  L1Cache& operator=(const L1Cache&) = delete;

  shm::ShmSegment& segment() { return *segment_; }
  alloc::SlabAllocator& allocator() { return *allocator_; }
  ObjectTable& table() { return *table_; }
  Evictor& evictor() { return *evictor_; }
  std::string_view eviction_policy() const { return policy_->name(); }
  FlowStats flow() const { return flow_.Snapshot(); }
  // How far pre-faulting got: `ready_bytes` of `total_bytes` are usable.
  using PrefaultProgress = store::PrefaultProgress;
  PrefaultProgress prefault() const;
  // The predecessor's side: stops pre-faulting and the evictor (nothing of
  // this process changes the pool after it), then exports the pool's image.
  // Every other writer (requests, the L2 tier) must have stopped before.
  PoolImage StopAndExport();
  // A successor adopted the segment: destruction unmaps it, never unlinks.
  void Disown() {
    segment_->Disown();
    if (journal_) journal_->Disown();
  }
  // The slot journal, or nullptr without one (L1Config::journal).
  SlotJournal* journal() { return journal_.get(); }
  // Waits until the pool is pre-faulted, up to `timeout`; true when it is.
  bool WaitPrefaulted(std::chrono::milliseconds timeout) const;

 private:
  L1Cache() = default;
  // Create's and Adopt's common part once the segment exists: the allocator
  // (pages below `ready_bytes` usable), the journal, the background
  // pre-faulter from there on, the table and the evictor.
  static Status Assemble(L1Cache* cache, const L1Config& config, const Clock* clock,
                         std::uint64_t ready_bytes);

  std::unique_ptr<shm::ShmSegment> segment_;
  // After the segment (its sealer reads the pool), before everything that records into it.
  std::unique_ptr<SlotJournal> journal_;
  std::unique_ptr<alloc::SlabAllocator> allocator_;
  std::unique_ptr<EvictionPolicy> policy_;
  FlowCounters flow_;  // declared before the table, so it outlives it
  std::unique_ptr<ObjectTable> table_;
  std::unique_ptr<Evictor> evictor_;
  // The background prefaulter (Prefault steps, then MakeReady).
  void PrefaultInBackground(std::uint64_t from, unsigned threads, std::uint64_t step,
                            const std::string& shm_dir,
                            const std::function<void(std::uint64_t)>& before_step);
  std::thread prefaulter_;
  std::atomic<bool> stop_prefault_{false};
  std::atomic<std::uint64_t> prefaulted_bytes_{0};
  std::atomic<bool> prefault_done_{false};
  std::atomic<bool> prefault_failed_{false};  // /dev/shm filled up meanwhile
  std::atomic<double> prefault_seconds_{0};
  std::atomic<std::uint64_t> huge_page_bytes_{0};
  void ReportPrefaultDone(double seconds, const char* how);
  // Stops and joins the pre-faulter and the evictor (idempotent).
  void StopBackgroundWork();
  std::chrono::steady_clock::time_point prefault_started_;
};

}  // namespace lmcache::store
