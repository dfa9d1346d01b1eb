#include "common/parallel.h"

#include <unistd.h>

#include <algorithm>

namespace lmcache {

unsigned HardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

std::vector<std::pair<std::size_t, std::size_t>> SplitRanges(std::size_t count, std::size_t grain,
                                                             unsigned threads) {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  if (count == 0) return ranges;
  grain = std::max<std::size_t>(grain, 1);
  if (threads == 0) threads = HardwareThreads();
  const std::size_t grains = (count + grain - 1) / grain;
  const std::size_t workers = std::min<std::size_t>(threads, grains);
  const std::size_t per_worker = (grains + workers - 1) / workers * grain;
  for (std::size_t begin = 0; begin < count; begin += per_worker) {
    ranges.emplace_back(begin, std::min(count, begin + per_worker));
  }
  return ranges;
}

void ParallelFor(std::size_t count, std::size_t grain, unsigned threads, const RangeBody& body) {
  const auto ranges = SplitRanges(count, grain, threads);
  if (ranges.empty()) return;
  std::vector<std::thread> pool;
  pool.reserve(ranges.size() - 1);
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    pool.emplace_back([&body, range = ranges[i]] { body(range.first, range.second); });
  }
  body(ranges[0].first, ranges[0].second);
  for (auto& t : pool) t.join();
}

ParallelRunner::ParallelRunner(unsigned threads) : owner_pid_(::getpid()) {
  if (threads == 0) threads = HardwareThreads();
  for (std::size_t i = 1; i < threads; ++i) helpers_.emplace_back([this, i] { HelperLoop(i); });
}

ParallelRunner::~ParallelRunner() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_ready_.NotifyAll();
  for (auto& t : helpers_) t.join();
}

void ParallelRunner::Run(std::size_t count, std::size_t grain, const RangeBody& body) {
  const auto ranges = SplitRanges(count, grain, threads());
  if (ranges.empty()) return;
  if (ranges.size() == 1 || ::getpid() != owner_pid_) {
    for (const auto& [begin, end] : ranges) body(begin, end);
    return;
  }
  MutexLock run_lock(&run_mu_);
  {
    MutexLock lock(&mu_);
    body_ = &body;
    ranges_ = ranges;
    unfinished_ = ranges.size() - 1;
    generation_ += 1;
  }
  work_ready_.NotifyAll();
  body(ranges[0].first, ranges[0].second);
  MutexLock lock(&mu_);
  while (unfinished_ > 0) work_done_.Wait(&lock);
  body_ = nullptr;
}

// Helper i runs range i of every Run that has one; a Run with fewer ranges
// leaves it idle until the next.
void ParallelRunner::HelperLoop(std::size_t index) {
  std::uint64_t seen = 0;
  while (true) {
    std::pair<std::size_t, std::size_t> range;
    const RangeBody* body = nullptr;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && generation_ == seen) work_ready_.Wait(&lock);
      if (stopping_) return;
      seen = generation_;
      if (index >= ranges_.size()) continue;
      range = ranges_[index];
      body = body_;
    }
    (*body)(range.first, range.second);
    MutexLock lock(&mu_);
    if (--unfinished_ == 0) work_done_.NotifyOne();
  }
}

}  // namespace lmcache
