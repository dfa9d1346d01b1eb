// The parts of a running prefetch that the controller's three files share
// (prefetch_controller.cc: the queue, its answers and the watch;
// prefetch_lookups.cc: the lookups and the plan they make;
// prefetch_loads.cc: the loads in batches and the admission into L1).
// Private to those three files: nothing else includes it.
//
// Thread-safety: as PrefetchController's (prefetch_controller.h): a Running
// request is touched by one thread at a time, handed on through its
// counters' release and acquire.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "tier/prefetch_controller.h"

namespace lmcache::tier {

// What the lookups found: per key of the planned prefix, the adapter it
// comes from, and per adapter the keys locked there (indices into the
// request's keys) that are still to be unlocked.
struct PrefetchController::Plan {
  static constexpr int kInL1 = -2;  // a source: resident in L1 already, nothing to load
  std::size_t chunks = 0;
  std::vector<int> source;
  std::vector<std::vector<std::size_t>> locked;
};

// One running request from its lookup to its answer: the lookups'
// completions fill `found` and the last one (or the worker that submitted
// them, when they all completed inline) goes on with the load; each batch
// of loads hands on the same way. One thread at a time touches the rest:
// the hand-over is the counters' release and acquire.
struct PrefetchController::Running {
  PrefetchHandle handle = 0;
  PrefetchRequest request;
  Deadline deadline;
  // The cascade it started with, and its adapters: each lookup, load and
  // unlock of the request goes to these.
  L2Cascade::View cascade;
  std::vector<L2Adapter*> adapters;
  std::size_t chunks_per_batch = 1;  // chunks per adapter call, for these adapters
  std::vector<std::vector<bool>> found;  // per adapter, one flag per key
  // Lookups outstanding, plus one held by the submitting worker until it
  // has submitted them all: whoever brings it to zero goes on.
  std::atomic<std::size_t> left{0};
  // The load, once planned: the plan, the L1 buffers, the chunks that will
  // be loaded (`usable`), the next chunk to load, and the batch in flight.
  Plan plan;
  // Leading chunks found that the engine holds (PrefetchRequest::
  // held_chunks): cut from `request` once planned, added to the answer.
  std::size_t held = 0;
  store::WriteLease buffers;
  std::size_t usable = 0;
  std::size_t next = 0;
  std::shared_ptr<BatchLoads> batch;
};

// One batch's loads across the adapters, shared with their completions.
struct PrefetchController::BatchLoads {
  explicit BatchLoads(std::size_t adapters)
      : outcomes(adapters), completed(new std::atomic<bool>[adapters]), left(adapters + 1) {
    for (std::size_t a = 0; a < adapters; ++a) completed[a] = false;
  }
  // Counts adapter `a` once (its completion, or its submission's failure);
  // true if this call was the one.
  bool Complete(std::size_t a) { return !completed[a].exchange(true); }

  std::vector<std::vector<L2LoadOutcome>> outcomes;
  std::unique_ptr<std::atomic<bool>[]> completed;
  // Adapters still loading, plus one held by the submitting worker: whoever
  // brings it to zero goes on with the request.
  std::atomic<std::size_t> left;
  // Per adapter, its reads of this batch and which keys they are.
  std::vector<std::vector<L2Read>> reads;
  std::vector<std::vector<std::size_t>> index;
  std::size_t end_chunk = 0;  // the batch loads chunks [Running::next, end_chunk)
};

namespace prefetch_parts {

// Takes the key indices `releases` picks out of `locked` (what one
// adapter's lookup locked), then unlocks their keys at `adapter`. Out of the
// plan first: an Unlock that throws is never retried, since a second unlock
// of a key could end another request's lock on it.
template <typename Releases>
inline void UnlockAt(L2Adapter& adapter, const std::vector<store::ObjectKey>& keys,
              std::vector<std::size_t>& locked, Releases releases) {
  std::vector<store::ObjectKey> release;
  std::erase_if(locked, [&](std::size_t i) {
    if (!releases(i)) return false;
    release.push_back(keys[i]);
    return true;
  });
  if (!release.empty()) adapter.Unlock(release);
}

// Unlocks, at every adapter, the locked keys with index >= `from`.
inline void UnlockFrom(const std::vector<L2Adapter*>& adapters, const std::vector<store::ObjectKey>& keys,
               std::vector<std::vector<std::size_t>>& locked, std::size_t from) {
  for (std::size_t a = 0; a < adapters.size(); ++a) {
    UnlockAt(*adapters[a], keys, locked[a], [from](std::size_t i) { return i >= from; });
  }
}

}  // namespace prefetch_parts

}  // namespace lmcache::tier
