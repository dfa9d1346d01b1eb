// StreamCopy: memcpy for large copies whose destination this thread will not
// read again soon, written with non-temporal (cache-bypassing) stores.
//
// Why: a client's copy of a KV chunk into the pool (or out of it into an
// engine's staging buffer) is 1-32 MiB that nobody on this core reads next.
// glibc's memcpy uses non-temporal stores only above a threshold derived from
// the last-level cache (240 MiB on the CI VMs' EPYC), so below it every
// destination line is first read into the cache (read-for-ownership) and then
// written back: a third more memory traffic, and 8 MiB copies into the pool
// ran at 11-12 GB/s where streaming stores reach 19-21 (docs/performance.md,
// issue 18). Below kStreamCopyMinBytes, or off x86-64, it is memcpy.
// The stores are fenced before returning: whatever the caller does next (a
// commit message to the server) is ordered after the copied bytes.
// Thread-safety: a pure function of its arguments; the ranges must not overlap.
#pragma once

#include <cstddef>

namespace lmcache {

// Copies below this size stay in glibc's memcpy: they may fit in the caches,
// where a later read of the destination is cheaper than the traffic saved.
inline constexpr std::size_t kStreamCopyMinBytes = 512u << 10;

void StreamCopy(void* dst, const void* src, std::size_t size);

}  // namespace lmcache
