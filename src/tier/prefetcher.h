// Prefetcher: what a lookup asks of the slower tiers (L2) for the chunks L1
// does not hold.
//
// After a lookup has read-locked the prefix of the prompt found in L1, the
// service hands the remaining chunks to a Prefetcher, which loads what it can
// from L2 into L1 and read-locks it for the same owner and reader count. The
// lookup's result is known only when the prefetch is done: until then
// query_prefetch_status answers nil (reference spec 9.3). With no L2
// configured there is no Prefetcher and the lookup completes from L1 at once.
// The L2 tier issue implements this interface (store/prefetch controllers).
//
// Thread-safety: implementations are internally synchronised; Submit, Poll
// and Wait may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "store/object_key.h"
#include "store/read_lease.h"

namespace lmcache::tier {

struct PrefetchRequest {
  // The chunks after the L1 prefix, chunk-major and rank-minor: chunk i of the
  // request is keys[i * ranks, (i + 1) * ranks).
  std::vector<store::ObjectKey> keys;
  std::size_t ranks = 1;
  std::uint32_t readers = 1;  // read locks to take per loaded object
  store::OwnerId owner = 0;   // owner of those locks (the lookup's session)
};

using PrefetchHandle = std::uint64_t;

class Prefetcher {
 public:
  virtual ~Prefetcher() = default;
  virtual PrefetchHandle Submit(PrefetchRequest request) = 0;
  // nullopt while the prefetch runs; then the number of leading chunks of the
  // request that are now in L1 on every rank and read-locked. The handle is
  // released by the first call that returns a value.
  virtual std::optional<std::size_t> Poll(PrefetchHandle handle) = 0;
  // Like Poll, but waits up to `timeout` for the result.
  virtual std::optional<std::size_t> Wait(PrefetchHandle handle,
                                          std::chrono::milliseconds timeout) = 0;
};

}  // namespace lmcache::tier
