// PrefetchController's loads (prefetch_controller.h): the planned chunks
// loaded in batches across the adapters into L1 buffers, each batch handed
// on by its last completion, and the loaded prefix admitted into L1.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/logging.h"
#include "tier/prefetch_controller_parts.h"

namespace lmcache::tier {

using prefetch_parts::UnlockFrom;

bool PrefetchController::Begin(Running& running) {
  const PrefetchRequest& request = running.request;
  const std::size_t ranks = std::max<std::size_t>(1, request.ranks);
  // The plan first: what it holds is what a failure from here on releases.
  running.plan = PlanFrom(request, running.found);
  Plan& plan = running.plan;
  ReleaseUnplanned(running.adapters, request, plan);
  counters_.l2_hit_chunks.fetch_add(plan.chunks, std::memory_order_relaxed);
  DropHeldChunks(running);
  DeclineSlowerThanRecompute(running);
  Publish(running.handle, running.held + plan.chunks);
  if (plan.chunks == 0 || request.object_bytes == 0) {
    UnlockFrom(running.adapters, request.keys, plan.locked, 0);
    return false;
  }
  // L1 buffers for the leading chunks that fit.
  const auto planned = std::span(request.keys).first(plan.chunks * ranks);
  auto buffers = table_->ReserveWrite(planned, request.object_bytes, LoaderOf(running.handle),
                                      store::AllocationMode::kLongestPrefix);
  if (buffers.ok()) running.buffers.lease = buffers->lease;  // a failure below aborts it
  // The leading chunks that will be in L1: staged for this load, or resident
  // already because another load brought them in since the lookup (still
  // hits, locked at admission: reference PR #4529 dropped them).
  std::size_t usable = 0;
  if (buffers.ok()) {
    while (usable < planned.size() &&
           buffers->outcomes[usable] != store::WriteReservation::kOutOfMemory) {
      ++usable;
    }
    usable /= ranks;
    for (std::size_t i = 0; i < usable * ranks; ++i) {
      if (buffers->outcomes[i] == store::WriteReservation::kAlreadyResident) {
        plan.source[i] = Plan::kInL1;
      }
    }
  }
  counters_.no_memory_chunks.fetch_add(plan.chunks - usable, std::memory_order_relaxed);
  UnlockFrom(running.adapters, request.keys, plan.locked, usable * ranks);
  if (usable == 0) {
    if (buffers.ok() && buffers->lease != store::kNoLease) table_->AbortWrite(buffers->lease);
    running.buffers = {};
    return false;
  }
  running.buffers = *std::move(buffers);
  running.usable = usable;
  running.next = 0;
  return true;
}

void PrefetchController::DropHeldChunks(Running& running) {
  Plan& plan = running.plan;
  running.held = std::min(running.request.held_chunks, plan.chunks);
  if (running.held == 0) return;
  counters_.engine_held_chunks.fetch_add(running.held, std::memory_order_relaxed);
  const std::size_t ranks = std::max<std::size_t>(1, running.request.ranks);
  const std::size_t cut = running.held * ranks;
  std::vector<store::ObjectKey>& keys = running.request.keys;
  // The plan is made whole first (the held keys out of every adapter's
  // list, the rest renumbered, the keys cut), the unlocks come after: an
  // Unlock that throws then leaves a plan whose every index is right for
  // ReleaseAfterFailure, and never a held key in it to unlock twice.
  std::vector<std::vector<store::ObjectKey>> release(running.adapters.size());
  for (std::size_t a = 0; a < running.adapters.size(); ++a) {
    std::vector<std::size_t>& locked = plan.locked[a];
    std::erase_if(locked, [&](std::size_t i) {
      if (i >= cut) return false;
      release[a].push_back(keys[i]);
      return true;
    });
    for (std::size_t& i : locked) i -= cut;
  }
  keys.erase(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(cut));
  plan.source.erase(plan.source.begin(), plan.source.begin() + static_cast<std::ptrdiff_t>(cut));
  plan.chunks -= running.held;
  running.request.held_chunks = 0;
  for (std::size_t a = 0; a < running.adapters.size(); ++a) {
    if (!release[a].empty()) running.adapters[a]->Unlock(release[a]);
  }
}

void PrefetchController::DeclineSlowerThanRecompute(Running& running) {
  const double recompute = running.request.recompute_seconds_per_chunk;
  Plan& plan = running.plan;
  if (recompute <= 0 || plan.chunks == 0) return;
  const std::size_t ranks = std::max<std::size_t>(1, running.request.ranks);
  // A chunk costs what its objects cost, each at its source's current rate;
  // a source with nothing measured lately counts as free (it loads, and so
  // gets measured: a tier declined once is tried again, see load_cost.h).
  auto meter = [&](std::size_t key) -> LoadCostMeter* {
    const int source = plan.source[key];
    return source < 0 ? nullptr : running.adapters[static_cast<std::size_t>(source)]->load_cost();
  };
  const auto now = std::chrono::steady_clock::now();
  std::vector<double> cost(plan.chunks, 0.0);
  for (std::size_t i = 0; i < plan.chunks * ranks; ++i) {
    if (LoadCostMeter* m = meter(i)) cost[i / ranks] += m->SecondsPerObject(now).value_or(0);
  }
  const std::size_t keep = BestPrefix(cost, recompute);
  if (keep == plan.chunks) return;
  for (std::size_t c = keep; c < plan.chunks; ++c) {
    if (LoadCostMeter* m = meter(c * ranks)) m->CountDeclined(1);
  }
  counters_.declined_slower_than_recompute.fetch_add(plan.chunks - keep, std::memory_order_relaxed);
  plan.chunks = keep;
  UnlockFrom(running.adapters, running.request.keys, plan.locked, keep * ranks);
}

bool PrefetchController::Cancelled(PrefetchHandle handle) const {
  MutexLock lock(&mu_);
  auto it = jobs_.find(handle);
  return it != jobs_.end() && it->second.cancelled;
}

void PrefetchController::LoadBatches(const std::shared_ptr<Running>& running) {
  // Each turn submits one batch; a batch every adapter completed inline
  // goes on here, one completed on an adapter's own thread goes on from a
  // worker again (BatchLoaded).
  while (true) {
    if (running->next >= running->usable) return Complete(*running, running->usable);
    if (running->deadline && std::chrono::steady_clock::now() >= *running->deadline) {
      counters_.deadline_expired.fetch_add(1, std::memory_order_relaxed);
      return Complete(*running, running->next);
    }
    if (Cancelled(running->handle)) {
      // Nobody will read it: what landed is admitted (and released by
      // Finish), the rest is not read.
      counters_.cancelled_loads.fetch_add(1, std::memory_order_relaxed);
      return Complete(*running, running->next);
    }
    SubmitBatch(running);
    if (running->batch->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (!TakeBatch(*running)) return;
  }
}

void PrefetchController::SubmitBatch(const std::shared_ptr<Running>& running) {
  const PrefetchRequest& request = running->request;
  const Plan& plan = running->plan;
  const std::size_t ranks = std::max<std::size_t>(1, request.ranks);
  const std::vector<L2Adapter*>& adapters = running->adapters;
  auto batch = std::make_shared<BatchLoads>(adapters.size());
  batch->end_chunk = std::min(running->usable, running->next + running->chunks_per_batch);
  batch->reads.resize(adapters.size());
  batch->index.resize(adapters.size());
  for (std::size_t i = running->next * ranks; i < batch->end_chunk * ranks; ++i) {
    if (plan.source[i] < 0) continue;
    auto out = table_->LeasedBytes(running->buffers.offsets[i], request.object_bytes);
    if (!out.ok()) continue;  // cannot happen for a reserved buffer; a miss then
    const auto a = static_cast<std::size_t>(plan.source[i]);
    batch->reads[a].push_back({&request.keys[i], *out});
    batch->index[a].push_back(i);
  }
  running->batch = batch;
  // The request goes on only once every adapter has completed: each writes
  // into buffers of this request (fail-stop, see the header). A submission
  // that throws (against the adapter contract) counts as nothing loaded,
  // and a completion after that is ignored.
  auto submit = [this, running, batch](std::size_t a) {
    auto complete = [this, running, batch]() {
      if (batch->left.fetch_sub(1, std::memory_order_acq_rel) == 1) BatchLoaded(running);
    };
    if (batch->reads[a].empty()) {
      if (batch->Complete(a)) complete();
      return;
    }
    try {
      running->adapters[a]->SubmitLoad(batch->reads[a],
                               [batch, a, complete](std::vector<L2LoadOutcome> result) {
                                 if (!batch->Complete(a)) return;
                                 batch->outcomes[a] = std::move(result);
                                 complete();
                               });
    } catch (const std::exception& e) {
      spdlog::error("an L2 adapter's load threw (its chunks count as not loaded): {}", e.what());
      if (batch->Complete(a)) complete();
    }
  };
  // A blocking adapter after the first runs on the cascade pool, so the
  // adapters of a cascade read side by side; one that completes on its own
  // needs no thread.
  for (std::size_t a = 1; a < adapters.size(); ++a) {
    if (batch->reads[a].empty() || adapters[a]->CompletesAsynchronously() ||
        CascadePool(adapters.size())->Submit(a, 0, [submit, a] { submit(a); }) !=
            FairQueue::Admission::kQueued) {
      submit(a);
    }
  }
  submit(0);
}

ThreadPool* PrefetchController::CascadePool(std::size_t adapters) {
  std::call_once(cascade_pool_once_, [this, adapters] {
    // Each running request may wait for every adapter after its first at once.
    cascade_pool_ = std::make_unique<ThreadPool>(
        "l2-cascade",
        std::max(1u, config_.max_in_flight) * static_cast<unsigned>(std::max<std::size_t>(1, adapters - 1)),
        FairQueueLimits{});
  });
  return cascade_pool_.get();
}

void PrefetchController::BatchLoaded(const std::shared_ptr<Running>& running) {
  // On an adapter's thread (or the cascade pool's), which must not run the
  // next batch's blocking loads: a worker goes on.
  HandOff(
      running,
      [this, running] {
        if (TakeBatch(*running)) LoadBatches(running);
      },
      [this, running] {
        // Stopping, or the queue is full: what landed so far is kept.
        if (TakeBatch(*running)) Complete(*running, running->next);
      });
}

bool PrefetchController::TakeBatch(Running& running) {
  const std::size_t ranks = std::max<std::size_t>(1, running.request.ranks);
  BatchLoads& batch = *running.batch;
  const std::size_t begin = running.next * ranks;
  const std::size_t end = batch.end_chunk * ranks;
  std::vector<bool> loaded(end - begin, false);
  for (std::size_t i = begin; i < end; ++i) loaded[i - begin] = running.plan.source[i] == Plan::kInL1;
  for (std::size_t a = 0; a < batch.outcomes.size(); ++a) {
    for (std::size_t j = 0; j < batch.outcomes[a].size() && j < batch.index[a].size(); ++j) {
      loaded[batch.index[a][j] - begin] = batch.outcomes[a][j] == L2LoadOutcome::kLoaded;
    }
  }
  running.batch.reset();
  for (std::size_t i = begin; i < end; ++i) {
    if (!loaded[i - begin]) {  // the prefix ends at the first incomplete chunk
      Complete(running, i / ranks);
      return false;
    }
  }
  running.next = end / ranks;
  return true;
}

void PrefetchController::Complete(Running& running, std::size_t loaded) {
  PrefetchResult result;
  try {
    result = Admit(running, loaded);
    result.chunks += running.held;  // the engine's own, before what landed
  } catch (const std::exception& e) {
    spdlog::error("L2 prefetch failed (the request gets its L1 hits only): {}", e.what());
  }
  Finish(running.handle, result);
}

PrefetchResult PrefetchController::Admit(Running& running, std::size_t loaded) {
  const PrefetchRequest& request = running.request;
  const std::size_t ranks = std::max<std::size_t>(1, request.ranks);
  UnlockFrom(running.adapters, request.keys, running.plan.locked, 0);
  counters_.load_failed_chunks.fetch_add(running.usable - loaded, std::memory_order_relaxed);
  if (loaded == 0) {
    table_->AbortWrite(running.buffers.lease);
    return {};
  }
  // Admit the loaded prefix already locked for the readers; free the rest.
  const auto planned = std::span(request.keys).first(running.plan.chunks * ranks);
  auto admitted = table_->FinishWriteAndRead(running.buffers.lease, request.owner, request.readers,
                                             planned.first(loaded * ranks),
                                             ServedOnce(running.adapters, running.plan,
                                                        loaded * ranks));
  if (!admitted.ok()) return {};
  std::size_t chunks = 0;
  while (chunks < loaded &&
         std::all_of(admitted->grants.begin() + static_cast<std::ptrdiff_t>(chunks * ranks),
                     admitted->grants.begin() + static_cast<std::ptrdiff_t>((chunks + 1) * ranks),
                     [](const store::ReadGrant& g) { return g.granted; })) {
    ++chunks;
  }
  if (admitted->lease != store::kNoLease && chunks < loaded) {
    // A key vanished before admission (deleted meanwhile): nothing after it counts.
    table_->ReleaseRead(admitted->lease, planned.subspan(chunks * ranks));
  }
  counters_.loaded_chunks.fetch_add(chunks, std::memory_order_relaxed);
  if (chunks == 0) {
    if (admitted->lease != store::kNoLease) table_->ReleaseRead(admitted->lease);
    return {};
  }
  return PrefetchResult{chunks, admitted->lease};
}

}  // namespace lmcache::tier
