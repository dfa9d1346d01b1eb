// ParallelFor and ParallelRunner: split [0, count) into contiguous ranges run
// on several threads at once.
//
// ParallelFor spawns `threads - 1` threads per call and joins them before
// returning: for one-off jobs of seconds (pre-faulting the pool).
// ParallelRunner keeps its threads for its whole life: for work that repeats
// many times a second (a client's copies into and out of the pool), where
// creating, faulting in and unmapping a thread's stack on every call would
// cost more than the parallelism gains (docs/performance.md, issue 18).
// Thread-safety: ParallelFor is reentrant. ParallelRunner::Run may be called
// from any thread; concurrent calls run one after the other. In a child
// forked after the runner started (its helpers did not survive the fork),
// Run does all the work on the calling thread instead of waiting for them. In both, `body`
// is called concurrently on disjoint ranges and the call returns once every
// range is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace lmcache {

using RangeBody = std::function<void(std::size_t begin, std::size_t end)>;

// Calls body(begin, end) on up to `threads` disjoint ranges covering [0, count).
// Ranges are multiples of `grain` (except the last). threads == 0 means one per
// hardware thread.
void ParallelFor(std::size_t count, std::size_t grain, unsigned threads, const RangeBody& body);

unsigned HardwareThreads();

// The ranges ParallelFor and ParallelRunner hand out: at most `threads` (the
// first one for the calling thread), contiguous, in order, none empty.
std::vector<std::pair<std::size_t, std::size_t>> SplitRanges(std::size_t count, std::size_t grain,
                                                             unsigned threads);

class ParallelRunner {
 public:
  // `threads` in all, the caller of Run included (threads - 1 are started
  // here); 0 means one per hardware thread.
  explicit ParallelRunner(unsigned threads);
  ~ParallelRunner();
  ParallelRunner(const ParallelRunner&) = delete;
  ParallelRunner& operator=(const ParallelRunner&) = delete;

  // As ParallelFor, on this runner's threads.
  void Run(std::size_t count, std::size_t grain, const RangeBody& body);
  unsigned threads() const { return static_cast<unsigned>(helpers_.size()) + 1; }

 private:
  void HelperLoop(std::size_t index);

  Mutex run_mu_;  // one Run at a time; taken before mu_
  Mutex mu_;
  CondVar work_ready_;
  CondVar work_done_;
  std::uint64_t generation_ LMC_GUARDED_BY(mu_) = 0;  // bumped per Run that uses helpers
  const RangeBody* body_ LMC_GUARDED_BY(mu_) = nullptr;
  std::vector<std::pair<std::size_t, std::size_t>> ranges_ LMC_GUARDED_BY(mu_);
  std::size_t unfinished_ LMC_GUARDED_BY(mu_) = 0;
  bool stopping_ LMC_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;
  const int owner_pid_;  // the process whose helpers these are
};

}  // namespace lmcache
