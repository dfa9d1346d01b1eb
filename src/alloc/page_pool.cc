#include "alloc/page_pool.h"

#include <algorithm>

namespace lmcache::alloc {

PagePool::PagePool(std::uint64_t num_pages, std::uint64_t ready_pages) {
  ready_pages = std::min(ready_pages, num_pages);
  if (ready_pages > 0) Insert(0, ready_pages);
}

void PagePool::Insert(std::uint64_t first, std::uint64_t count) {
  by_start_.emplace(first, count);
  by_size_.emplace(count, first);
  free_pages_ += count;
}

void PagePool::Erase(std::map<std::uint64_t, std::uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_pages_ -= it->second;
  by_start_.erase(it);
}

std::optional<std::uint64_t> PagePool::Take(std::uint64_t count) {
  if (count == 0) return std::nullopt;
  auto fit = by_size_.lower_bound({count, 0});
  if (fit == by_size_.end()) return std::nullopt;
  const auto [run_count, first] = *fit;
  Erase(by_start_.find(first));
  if (run_count > count) Insert(first + count, run_count - count);
  return first;
}

bool PagePool::TakeAt(std::uint64_t first, std::uint64_t count) {
  if (count == 0) return false;
  auto run = by_start_.upper_bound(first);
  if (run == by_start_.begin()) return false;
  run = std::prev(run);
  const auto [run_first, run_count] = *run;
  if (first + count < first || run_first + run_count < first + count) return false;
  Erase(run);
  if (first > run_first) Insert(run_first, first - run_first);
  if (run_first + run_count > first + count) {
    Insert(first + count, run_first + run_count - (first + count));
  }
  return true;
}

void PagePool::Give(std::uint64_t first, std::uint64_t count) {
  if (count == 0) return;
  std::uint64_t start = first;
  std::uint64_t length = count;
  auto next = by_start_.lower_bound(first);
  if (next != by_start_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == first) {
      start = prev->first;
      length += prev->second;
      Erase(prev);
    }
  }
  next = by_start_.lower_bound(first);
  if (next != by_start_.end() && next->first == first + count) {
    length += next->second;
    Erase(next);
  }
  Insert(start, length);
}

}  // namespace lmcache::alloc
