// PrefetchController's lookups (prefetch_controller.h): a queued request
// run, its lookups sent to every adapter of its cascade, and the plan their
// answers make: which adapter each chunk of the prefix is loaded from, and
// what is unlocked where.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/logging.h"
#include "tier/prefetch_controller_parts.h"

namespace lmcache::tier {

using prefetch_parts::UnlockAt;
using prefetch_parts::UnlockFrom;

void PrefetchController::RunQueued(PrefetchHandle handle) {
  auto running = std::make_shared<Running>();
  running->handle = handle;
  {
    MutexLock lock(&mu_);
    auto it = jobs_.find(handle);
    if (it == jobs_.end() || !it->second.queued) return;  // cancelled, or answered at Stop
    if (running_ >= max_running_) {
      // A request whose lookup or load is out holds no worker, so the
      // workers alone do not bound how many run (each holding L1 buffers
      // and adapter locks): this one waits, still queued, until one ends
      // (Finish starts it).
      waiting_.push_back(handle);
      return;
    }
    Job& job = it->second;
    job.queued = false;
    queued_ -= 1;
    running->request = job.request;
    job.started = std::chrono::steady_clock::now();
    if (config_.load_timeout.count() > 0) running->deadline = *job.started + config_.load_timeout;
    running_ += 1;
  }
  // The cascade as it is now, held to the answer: every call of this
  // request goes to these adapters.
  running->cascade = cascade_->Current();
  running->adapters = running->cascade.adapters();
  const std::vector<L2Adapter*>& adapters = running->adapters;
  running->chunks_per_batch = std::max<std::size_t>(
      1, !adapters.empty() && std::all_of(adapters.begin(), adapters.end(), [](L2Adapter* a) {
           return a->CompletesAsynchronously();
         })
             ? config_.async_chunks_per_batch
             : config_.chunks_per_batch);
  const std::size_t n = running->request.keys.size();
  running->found.assign(adapters.size(), std::vector<bool>(n, false));
  running->left.store(adapters.size() + 1, std::memory_order_relaxed);
  for (std::size_t a = 0; a < adapters.size(); ++a) {
    try {
      adapters[a]->SubmitLookup(running->request.keys, running->request.object_bytes,
                                 [this, running, a, n](std::vector<bool> found) {
                                   found.resize(n, false);  // an adapter's short answer: misses
                                   running->found[a] = std::move(found);
                                   LookedUp(running, /*on_worker=*/false);
                                 });
    } catch (const std::exception& e) {
      spdlog::error("an L2 adapter's lookup threw (it holds none of the keys): {}", e.what());
      LookedUp(running, /*on_worker=*/false);
    }
  }
  LookedUp(running, /*on_worker=*/true);
}

void PrefetchController::LookedUp(const std::shared_ptr<Running>& running, bool on_worker) {
  if (running->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (on_worker) {
    Continue(running);
    return;
  }
  // The last answer came on an adapter's own thread, which must not wait
  // for a load: the rest runs on a worker again.
  HandOff(running, [this, running] { Continue(running); }, [this, running] {
    // Stopping, or the queue is full: nothing is loaded, and what the
    // lookups locked is released.
    Plan plan = PlanFrom(running->request, running->found);
    UnlockFrom(running->adapters, running->request.keys, plan.locked, 0);
    counters_.refused.fetch_add(1, std::memory_order_relaxed);
    Finish(running->handle, PrefetchResult{});
  });
}

void PrefetchController::HandOff(const std::shared_ptr<Running>& running,
                                 std::function<void()> next, std::function<void()> refused) {
  {
    MutexLock lock(&mu_);
    handoffs_ += 1;
  }
  const std::uint64_t client = store::OwnerHash{}(running->request.owner);
  if (workers_->Submit(client, 0, std::move(next)) != FairQueue::Admission::kQueued) refused();
  // Counted until here: the worker may have run `next` and ended the
  // request while Submit was still waking it, so Stop (and the
  // controller's end) waits for this thread to be out of the pool too.
  MutexLock lock(&mu_);
  handoffs_ -= 1;
  if (handoffs_ == 0) landed_.NotifyAll();
}

void PrefetchController::Continue(const std::shared_ptr<Running>& running) {
  bool loading = false;
  bool failed = false;
  try {
    loading = Begin(*running);
  } catch (const std::exception& e) {
    spdlog::error("L2 prefetch failed (the request gets its L1 hits only): {}", e.what());
    ReleaseAfterFailure(*running);
    failed = true;
  }
  if (!loading) {
    // Nothing to load: what the engine holds may still extend the prefix.
    Finish(running->handle, PrefetchResult{failed ? 0 : running->held, store::kNoLease});
    return;
  }
  LoadBatches(running);
}

PrefetchController::Plan PrefetchController::PlanFrom(const PrefetchRequest& request,
                                                      const std::vector<std::vector<bool>>& found) {
  const std::size_t n = request.keys.size();
  const std::size_t ranks = std::max<std::size_t>(1, request.ranks);
  Plan plan;
  plan.source.assign(n, -1);
  const std::size_t adapters = found.size();
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t a = 0; a < adapters; ++a) {
      if (found[a][i]) {
        plan.source[i] = static_cast<int>(a);
        break;
      }
    }
  }
  while (plan.chunks < n / ranks) {
    const auto first = plan.source.begin() + static_cast<std::ptrdiff_t>(plan.chunks * ranks);
    if (std::any_of(first, first + static_cast<std::ptrdiff_t>(ranks), [](int s) { return s < 0; })) {
      break;
    }
    plan.chunks += 1;
  }
  plan.locked.resize(adapters);
  for (std::size_t a = 0; a < adapters; ++a) {
    for (std::size_t i = 0; i < n; ++i) {
      if (found[a][i]) plan.locked[a].push_back(i);
    }
  }
  return plan;
}

void PrefetchController::ReleaseUnplanned(const std::vector<L2Adapter*>& adapters,
                                          const PrefetchRequest& request, Plan& plan) {
  const std::size_t planned = plan.chunks * std::max<std::size_t>(1, request.ranks);
  for (std::size_t a = 0; a < adapters.size(); ++a) {
    UnlockAt(*adapters[a], request.keys, plan.locked[a], [&](std::size_t i) {
      return i >= planned || plan.source[i] != static_cast<int>(a);
    });
  }
}

std::vector<bool> PrefetchController::ServedOnce(const std::vector<L2Adapter*>& adapters,
                                                const Plan& plan, std::size_t keys) {
  std::vector<bool> once(keys, false);
  bool any = false;
  for (std::size_t i = 0; i < keys; ++i) {
    const int source = plan.source[i];
    once[i] = source >= 0 && !adapters[static_cast<std::size_t>(source)]->KeepsLoadedObjects();
    any = any || once[i];
  }
  if (!any) once.clear();
  return once;
}

void PrefetchController::ReleaseAfterFailure(Running& running) {
  std::vector<std::vector<std::size_t>>& locked = running.plan.locked;
  for (std::size_t a = 0; a < locked.size(); ++a) {
    try {
      UnlockAt(*running.adapters[a], running.request.keys, locked[a],
               [](std::size_t) { return true; });
    } catch (const std::exception& e) {
      // Its locks are its own now: released by its own rules (a peer's read
      // TTL, an index's restart), never by a guess here.
      spdlog::error("an L2 adapter's unlock threw: {}", e.what());
    }
  }
  if (running.buffers.lease != store::kNoLease) {
    table_->AbortWrite(running.buffers.lease);
    running.buffers = {};
  }
}

}  // namespace lmcache::tier
