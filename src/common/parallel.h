// ParallelFor: split [0, count) into contiguous ranges run on short-lived threads.
//
// Used where a large one-off job (pre-faulting the pool, copying many MiB)
// must use every core. Not a pool: it spawns `threads - 1` threads per call and
// joins them before returning, so it suits jobs of milliseconds or more.
// Thread-safety: reentrant; `body` is called concurrently on disjoint ranges.
#pragma once

#include <cstddef>
#include <functional>

namespace lmcache {

// Calls body(begin, end) on up to `threads` disjoint ranges covering [0, count).
// Ranges are multiples of `grain` (except the last). threads == 0 means one per
// hardware thread.
void ParallelFor(std::size_t count, std::size_t grain, unsigned threads,
                 const std::function<void(std::size_t, std::size_t)>& body);

unsigned HardwareThreads();

}  // namespace lmcache
