// PagePool: the free runs of fixed-size pages of the managed span.
//
// Size classes take whole runs of contiguous pages (slabs) from here and give
// them back when they empty, so memory moves between object sizes. Runs are
// kept coalesced; allocation is best fit (smallest run that is large enough,
// lowest address among equals), which keeps large runs intact.
//
// Thread-safety: not synchronised; SlabAllocator calls it under its mutex.
// Invariants: runs never overlap or touch (adjacent runs are merged);
// by_start_ and by_size_ hold the same runs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace lmcache::alloc {

class PagePool {
 public:
  // Pages [0, ready_pages) are free at once; the rest join with Give() as
  // they become usable (the pool's pages are pre-faulted in the background).
  PagePool(std::uint64_t num_pages, std::uint64_t ready_pages);

  // First page of a run of `count` pages, or nullopt when no run is that long.
  std::optional<std::uint64_t> Take(std::uint64_t count);
  // Takes exactly [first, first + count): false, with nothing taken, unless
  // one free run holds all of it (a server adopting its predecessor's slabs).
  bool TakeAt(std::uint64_t first, std::uint64_t count);
  // Returns [first, first + count) to the pool, merging with its neighbours.
  void Give(std::uint64_t first, std::uint64_t count);

  std::uint64_t free_pages() const { return free_pages_; }
  std::uint64_t largest_run() const { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  std::uint64_t run_count() const { return by_start_.size(); }

 private:
  void Insert(std::uint64_t first, std::uint64_t count);
  void Erase(std::map<std::uint64_t, std::uint64_t>::iterator it);

  std::map<std::uint64_t, std::uint64_t> by_start_;            // first page -> count
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  // (count, first page)
  std::uint64_t free_pages_ = 0;
};

}  // namespace lmcache::alloc
