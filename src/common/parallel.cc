#include "common/parallel.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace lmcache {

unsigned HardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

void ParallelFor(std::size_t count, std::size_t grain, unsigned threads,
                 const std::function<void(std::size_t, std::size_t)>& body) {
  if (count == 0) return;
  grain = std::max<std::size_t>(grain, 1);
  if (threads == 0) threads = HardwareThreads();
  const std::size_t grains = (count + grain - 1) / grain;
  const std::size_t workers = std::min<std::size_t>(threads, grains);
  const std::size_t grains_per_worker = (grains + workers - 1) / workers;
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (std::size_t w = 1; w < workers; ++w) {
    const std::size_t begin = std::min(count, w * grains_per_worker * grain);
    const std::size_t end = std::min(count, (w + 1) * grains_per_worker * grain);
    if (begin < end) pool.emplace_back([&body, begin, end] { body(begin, end); });
  }
  body(0, std::min(count, grains_per_worker * grain));
  for (auto& t : pool) t.join();
}

}  // namespace lmcache
