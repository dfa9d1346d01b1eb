// Prefetcher: what a lookup asks of the slower tiers (L2) for the chunks L1
// does not hold.
//
// After a lookup has read-locked the prefix of the prompt found in L1, the
// service hands the remaining chunks to a Prefetcher, which loads what it can
// from L2 into L1 and admits it already read-locked (ObjectTable::
// FinishWriteAndRead) under one read lease of the request's owner, with the
// lookup's reader count. The lookup's result is known only when the
// prefetch is done: until then query_prefetch_status answers nil (reference
// spec 9.3). With no L2 configured there is no Prefetcher and the lookup
// completes from L1 at once.
//
// Nothing here blocks: a caller that must wait for a result (the
// wait_prefetch_status operation) asks to be notified when it lands and
// parks its request meanwhile (server/parked_requests.h).
//
// Thread-safety: implementations are internally synchronised; every method
// may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "store/object_key.h"
#include "store/owner.h"

namespace lmcache::tier {

struct PrefetchRequest {
  // The chunks after the L1 prefix, chunk-major and rank-minor: chunk i of the
  // request is keys[i * ranks, (i + 1) * ranks).
  std::vector<store::ObjectKey> keys;
  std::size_t ranks = 1;
  std::uint32_t readers = 1;  // read locks to take per loaded object
  store::Owner owner;         // owner of those locks (the lookup's session)
  std::uint64_t object_bytes = 0;  // the size of every object of the request (its layout's)
  // Leading chunks of the request the engine already holds (the lookup's
  // lmcache.hint.engine_computed_tokens): looked up, and counted in the
  // result where found, but never loaded, as no worker will retrieve them.
  std::size_t held_chunks = 0;
  // Seconds the engine takes to recompute one chunk of this request (its
  // model's --prefill-tokens-per-second); 0: always load. Otherwise only
  // the prefix of chunks whose load saves time is loaded (tier/load_cost.h).
  double recompute_seconds_per_chunk = 0;
};

// What a finished prefetch found: the leading `chunks` chunks of the
// request, present on every rank; those after its held chunks are in L1,
// read-locked under `lease` (kNoLease when none landed). The caller owns
// the lease from then on.
struct PrefetchResult {
  std::size_t chunks = 0;
  store::LeaseId lease = store::kNoLease;
};

using PrefetchHandle = std::uint64_t;

class Prefetcher {
 public:
  virtual ~Prefetcher() = default;
  virtual PrefetchHandle Submit(PrefetchRequest request) = 0;
  // nullopt while the prefetch runs, then its result. The handle is released
  // by the first call that returns a value.
  virtual std::optional<PrefetchResult> Poll(PrefetchHandle handle) = 0;
  // The chunks the slower tiers hold after the L1 prefix (the prefix the
  // prefetch will try to load), once their lookups are done; nullopt before
  // (query_prefetch_lookup_hits, reference spec 9.4). Does not release the handle.
  virtual std::optional<std::size_t> LookupHits(PrefetchHandle handle) = 0;
  // Calls `landed` once when Poll(handle) can answer: the prefetch finished,
  // was cancelled, or the prefetcher stopped; at once (on this thread) when it
  // can already, or the handle is unknown. Otherwise on the thread that ended
  // the prefetch, with no lock of the prefetcher held: `landed` must be short.
  virtual void NotifyWhenLanded(PrefetchHandle handle, std::function<void()> landed) = 0;
  // The caller no longer wants the result (its session ended): whatever the
  // prefetch locked, now or when it lands, is released.
  virtual void Cancel(PrefetchHandle handle) = 0;
};

}  // namespace lmcache::tier
