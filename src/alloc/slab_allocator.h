// SlabAllocator: fixed-size objects carved from slabs of a span it is handed.
//
// Built for KV chunks: every object of one layout has the same size (a 256-token
// chunk of an 8B model in bf16 is 32 MiB) and a node serves a few layouts at
// once. Each distinct aligned object size is a size class. A class takes slabs
// (runs of whole pages, sized to hold about `slab_target_bytes` of its objects)
// from a global PagePool; a slab that empties goes back to the pool, so memory
// moves freely between classes. Objects are named by their byte offset from the
// span base, never by pointer, so the same value means the same bytes in every
// process that maps the segment. All metadata (free-slot stacks, the page ->
// slab table) lives in this process's heap, never inside the span, which
// clients may write.
//
// Thread-safety: internally synchronised by one mutex; every method may be
// called from any thread. The allocator is a leaf in the lock order: it calls
// nothing while holding its mutex.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "alloc/allocator_stats.h"
#include "alloc/page_pool.h"
#include "common/mutex.h"
#include "lmcache/status.h"

namespace lmcache::alloc {

// Byte offset of an object from the start of the managed span.
using Offset = std::uint64_t;

struct SlabAllocatorConfig {
  // Alignment and size granule of every object, in bytes. Power of two >= 64.
  // Default 4096 (one page; the reference's --l1-align-bytes default).
  std::uint64_t align_bytes = 4096;
  // Granule of the global page pool in bytes: slabs are whole runs of pages.
  // Multiple of align_bytes. Default 2 MiB.
  std::uint64_t page_bytes = 2ull << 20;
  // A slab holds max(1, floor(slab_target_bytes / object size)) objects, rounded
  // up to whole pages. Larger slabs mean fewer pool operations; smaller ones
  // return memory to the pool sooner. Default 64 MiB.
  std::uint64_t slab_target_bytes = 64ull << 20;
  // Upper bound on simultaneously existing size classes (a class disappears
  // when its last slab empties). Default 256.
  std::uint32_t max_classes = 256;
};

// One live slab, as a successor server needs it to adopt the slab's objects
// (docs/architecture.md, "Restarts and upgrades").
struct SlabRecord {
  std::uint64_t first_page = 0;
  std::uint64_t num_pages = 0;
  std::uint64_t object_bytes = 0;  // aligned size of its objects
  bool operator==(const SlabRecord&) const = default;
};

// Told of every slab as it comes and goes (a crash-recovery journal keeps
// them where a successor can read them after a kill -9). Called with the
// allocator's mutex held: it must not call back in, and must not block.
class SlabObserver {
 public:
  virtual ~SlabObserver() = default;
  virtual void SlabAdded(const SlabRecord& slab) = 0;
  virtual void SlabReleased(const SlabRecord& slab) = 0;
};

class SlabAllocator {
 public:
  // `span` must be aligned to config.align_bytes. Fails on an invalid config.
  // Only the first `ready_bytes` of the span are handed out until MakeReady()
  // says more are (a pool pre-faulted in the background never hands out a
  // page nobody touched: a first-touch copy runs at a few hundred MB/s).
  static Result<std::unique_ptr<SlabAllocator>> Create(
      std::span<std::byte> span, const SlabAllocatorConfig& config,
      std::uint64_t ready_bytes = static_cast<std::uint64_t>(-1));

  // The pages below `bytes` (rounded down to whole pages) may be handed out.
  void MakeReady(std::uint64_t bytes) LMC_EXCLUDES(mu_);
  std::uint64_t ready_bytes() const LMC_EXCLUDES(mu_);
  // Waits up to `timeout` for ready_bytes() to exceed `seen`; false when it
  // did not (or everything already is ready).
  bool WaitReadyBeyond(std::uint64_t seen, std::chrono::milliseconds timeout) LMC_EXCLUDES(mu_);
  // No more pages will become ready (pre-faulting stopped short): waiters return.
  void StopGrowing() LMC_EXCLUDES(mu_);
  // True while pages are still being made ready (pre-faulting goes on).
  bool growing() const LMC_EXCLUDES(mu_);
  // Calls `wake` once ready_bytes() exceeds `seen` or the pool stops growing:
  // at once (on this thread) when that is so already, else on the thread of
  // the MakeReady() or StopGrowing() that makes it so, with no lock held.
  // The waiting form of WaitReadyBeyond for a caller that must not block.
  void NotifyWhenReadyBeyond(std::uint64_t seen, std::function<void()> wake) LMC_EXCLUDES(mu_);

  SlabAllocator(const SlabAllocator&) = delete;
  SlabAllocator& operator=(const SlabAllocator&) = delete;

  // One object of at least `size` bytes (rounded up to the alignment).
  Result<Offset> Allocate(std::uint64_t size) LMC_EXCLUDES(mu_);
  // `count` objects of `size` bytes: all of them, or none (kOutOfMemory).
  Result<std::vector<Offset>> AllocateBatch(std::uint64_t size, std::size_t count)
      LMC_EXCLUDES(mu_);
  // Frees an object. Rejects offsets that are not a live object's start
  // (kInvalidArgument), so a bad offset can never corrupt the free lists.
  Status Free(Offset offset) LMC_EXCLUDES(mu_);
  // Frees each offset; returns the first error but frees every valid one.
  Status FreeBatch(std::span<const Offset> offsets) LMC_EXCLUDES(mu_);

  // The aligned size of the live object at `offset`, or an error.
  Result<std::uint64_t> ObjectSize(Offset offset) const LMC_EXCLUDES(mu_);
  std::uint64_t AlignedSize(std::uint64_t size) const;

  AllocatorStats Stats() const LMC_EXCLUDES(mu_);
  std::uint64_t UsedBytes() const LMC_EXCLUDES(mu_);
  std::uint64_t capacity_bytes() const { return num_pages_ * config_.page_bytes; }
  const SlabAllocatorConfig& config() const { return config_; }

  // Subscribes `observer` (nullptr: none) and tells it of every live slab at
  // once. It must outlive the allocator or be unsubscribed first.
  void SetSlabObserver(SlabObserver* observer) LMC_EXCLUDES(mu_);

  // --- handover (a successor server adopts this pool's objects in place) ---
  // Every live slab, by first page.
  std::vector<SlabRecord> Slabs() const LMC_EXCLUDES(mu_);
  // Rebuilds `slabs` at their pages and marks the objects at `offsets` in
  // use, so no committed byte is copied. Only on a fresh allocator (nothing
  // allocated yet) with the predecessor's configuration; every slab must lie
  // in ready pages, and every offset must start a slot of one of them, once.
  // Slabs left without an object go back to the pool. On an error (the
  // records contradict each other or this configuration) the allocator is
  // in an unspecified state and must be discarded.
  Status Adopt(std::span<const SlabRecord> slabs, std::span<const Offset> offsets)
      LMC_EXCLUDES(mu_);

  // The bytes of [offset, offset + length) if they lie inside the span.
  Result<std::byte*> Resolve(Offset offset, std::uint64_t length) const;

 private:
  struct Slab {
    std::uint32_t class_id = 0;
    std::uint64_t first_page = 0;
    std::uint64_t num_pages = 0;
    std::uint32_t capacity = 0;
    std::vector<std::uint32_t> free_slots;  // stack; lowest index on top
    std::vector<bool> in_use;
    bool live = false;
  };
  struct SizeClass {
    std::uint64_t object_bytes = 0;
    std::uint32_t objects_per_slab = 0;
    std::uint64_t pages_per_slab = 0;
    std::uint64_t slabs = 0;
    std::uint64_t used = 0;
    std::uint64_t free_slots = 0;
    std::map<std::uint64_t, std::uint32_t> partial;  // first page -> slab id, slabs with free slots
    bool live = false;
  };

  SlabAllocator(std::span<std::byte> span, const SlabAllocatorConfig& config,
                std::uint64_t ready_pages);

  Result<std::uint32_t> ClassForLocked(std::uint64_t object_bytes) LMC_REQUIRES(mu_);
  void MaybeRetireClassLocked(std::uint32_t class_id) LMC_REQUIRES(mu_);
  // The id of a new slab for the class, or nullopt when the pool has no run for it.
  std::optional<std::uint32_t> AddSlabLocked(std::uint32_t class_id) LMC_REQUIRES(mu_);
  void ReleaseSlabLocked(std::uint32_t slab_id) LMC_REQUIRES(mu_);
  Offset TakeSlotLocked(std::uint32_t class_id) LMC_REQUIRES(mu_);
  // Adopt's steps: a slab at the record's pages, and one object in it.
  Status AdoptSlabLocked(const SlabRecord& record) LMC_REQUIRES(mu_);
  Status AdoptObjectLocked(Offset offset) LMC_REQUIRES(mu_);
  // Slab bookkeeping shared by AddSlabLocked and AdoptSlabLocked: a slab of
  // `class_id` over [first, first + pages), every slot free.
  std::uint32_t InstallSlabLocked(std::uint32_t class_id, std::uint64_t first, std::uint64_t pages)
      LMC_REQUIRES(mu_);
  // The slab whose slot `offset` starts, that slot in *slot, when the slot is
  // in use (`in_use`) or free (an object being adopted).
  Result<std::uint32_t> SlabOfLocked(Offset offset, std::uint32_t* slot, bool in_use = true) const
      LMC_REQUIRES(mu_);
  Status FreeLocked(Offset offset) LMC_REQUIRES(mu_);
  Result<std::vector<Offset>> AllocateLocked(std::uint64_t size, std::size_t count)
      LMC_REQUIRES(mu_);

  const std::span<std::byte> span_;
  const SlabAllocatorConfig config_;
  const std::uint64_t num_pages_;

  mutable Mutex mu_;
  PagePool pool_ LMC_GUARDED_BY(mu_);
  std::uint64_t ready_pages_ LMC_GUARDED_BY(mu_);
  bool growing_ LMC_GUARDED_BY(mu_) = true;
  CondVar ready_grew_;
  std::vector<std::function<void()>> ready_waiters_ LMC_GUARDED_BY(mu_);
  std::vector<std::uint32_t> page_to_slab_ LMC_GUARDED_BY(mu_);  // slab id + 1; 0 = free page
  std::vector<Slab> slabs_ LMC_GUARDED_BY(mu_);
  std::vector<std::uint32_t> unused_slab_ids_ LMC_GUARDED_BY(mu_);
  std::vector<SizeClass> classes_ LMC_GUARDED_BY(mu_);
  std::map<std::uint64_t, std::uint32_t> class_by_size_ LMC_GUARDED_BY(mu_);
  std::uint64_t used_bytes_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t allocations_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t frees_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t failed_allocations_ LMC_GUARDED_BY(mu_) = 0;
  SlabObserver* observer_ LMC_GUARDED_BY(mu_) = nullptr;
};

}  // namespace lmcache::alloc
