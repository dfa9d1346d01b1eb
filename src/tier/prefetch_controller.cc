#include "tier/prefetch_controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/logging.h"

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

namespace {

// Takes the key indices `releases` picks out of `locked` (what one
// adapter's lookup locked), then unlocks their keys at `adapter`. Out of the
// plan first: an Unlock that throws is never retried, since a second unlock
// of a key could end another request's lock on it.
template <typename Releases>
void UnlockAt(L2Adapter& adapter, const std::vector<store::ObjectKey>& keys,
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
void UnlockFrom(const std::vector<L2Adapter*>& adapters, const std::vector<store::ObjectKey>& keys,
               std::vector<std::vector<std::size_t>>& locked, std::size_t from) {
  for (std::size_t a = 0; a < adapters.size(); ++a) {
    UnlockAt(*adapters[a], keys, locked[a], [from](std::size_t i) { return i >= from; });
  }
}

// How often the watch looks for requests past their deadline: a tenth of
// the deadline, between 10 ms and 1 s.
std::chrono::milliseconds WatchPeriod(std::chrono::milliseconds load_timeout) {
  return std::clamp(load_timeout / 10, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

}  // namespace

PrefetchController::PrefetchController(store::ObjectTable* table, const L2Cascade* cascade,
                                       const PrefetchControllerConfig& config)
    : table_(table),
      cascade_(cascade),
      config_(config),
      max_running_(config.max_running > 0 ? config.max_running
                                          : 4 * std::size_t{std::max(1u, config.max_in_flight)}) {}

PrefetchController::PrefetchController(store::ObjectTable* table,
                                       const std::vector<L2Adapter*>& adapters,
                                       const PrefetchControllerConfig& config)
    : table_(table),
      fixed_(L2Cascade::Borrowing(adapters)),
      cascade_(fixed_.get()),
      config_(config),
      max_running_(config.max_running > 0 ? config.max_running
                                          : 4 * std::size_t{std::max(1u, config.max_in_flight)}) {}

PrefetchController::~PrefetchController() { Stop(); }

void PrefetchController::Start() {
  if (workers_) return;
  {
    MutexLock lock(&mu_);
    stop_ = false;
  }
  FairQueueLimits limits;
  limits.client_tasks = limits.total_tasks = std::max<std::size_t>(1, config_.max_queued);
  limits.client_bytes = limits.total_bytes = std::max<std::size_t>(1, config_.max_queued_bytes);
  workers_ = std::make_unique<ThreadPool>("l2-prefetch", std::max(1u, config_.max_in_flight), limits);
  if (config_.load_timeout.count() > 0) {
    watch_ = std::make_unique<PeriodicThread>("prefetch-watch", WatchPeriod(config_.load_timeout),
                                              [this] { AbandonOverdue(); });
    watch_->Start();
  }
}

void PrefetchController::Stop() {
  if (watch_) watch_->Stop();
  std::vector<std::function<void()>> landed;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    for (auto& [handle, job] : jobs_) AnswerUnrun(job, landed);
  }
  RunLanded(landed);
  landed_.NotifyAll();
  // The queued tasks find their requests answered; the running ones finish
  // (their cascade loads with them).
  if (workers_) workers_->Stop();
  // A request whose lookup is still with an adapter (a peer's answer)
  // ends when that answer comes, at the latest at the adapter's deadline.
  {
    MutexLock lock(&mu_);
    while (running_ > 0 || finishing_ > 0 || handoffs_ > 0) landed_.Wait(&lock);
  }
  // Every request has ended, and with it every call to CascadePool (each
  // before its request's Finish took mu_ above).
  if (cascade_pool_) cascade_pool_->Stop();
}

bool PrefetchController::AnswerUnrun(Job& job, std::vector<std::function<void()>>& landed) {
  if (!job.queued) return false;
  job.queued = false;
  queued_ -= 1;
  job.lookup_hits = 0;
  job.result = PrefetchResult{};  // nothing loaded
  for (auto& fn : job.on_landed) landed.push_back(std::move(fn));
  job.on_landed.clear();
  return true;
}

PrefetchHandle PrefetchController::Submit(PrefetchRequest request) {
  counters_.submitted.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t client = store::OwnerHash{}(request.owner);
  const std::size_t bytes = request.keys.size() * sizeof(store::ObjectKey);
  PrefetchHandle handle = 0;
  {
    MutexLock lock(&mu_);
    handle = ++next_;
    Job& job = jobs_[handle];
    job.request = std::move(request);
    job.submitted = std::chrono::steady_clock::now();
    if (stop_ || !workers_) {
      job.lookup_hits = 0;
      job.result = PrefetchResult{};
      return handle;
    }
    job.queued = true;
    queued_ += 1;
  }
  // Queued outside mu_: a worker may take it at once, and RunQueued locks mu_.
  if (workers_->Submit(client, bytes, [this, handle] { RunQueued(handle); }) ==
      FairQueue::Admission::kQueued) {
    return handle;
  }
  std::vector<std::function<void()>> landed;
  {
    MutexLock lock(&mu_);
    auto it = jobs_.find(handle);
    if (it != jobs_.end() && AnswerUnrun(it->second, landed) && !stop_) {
      counters_.refused.fetch_add(1, std::memory_order_relaxed);
    }
  }
  RunLanded(landed);
  return handle;
}

std::optional<PrefetchResult> PrefetchController::Poll(PrefetchHandle handle) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(handle);
  if (it == jobs_.end()) return PrefetchResult{};  // unknown: nothing to wait for
  if (!it->second.result) return std::nullopt;
  const PrefetchResult result = *it->second.result;
  jobs_.erase(it);
  return result;
}

std::optional<std::size_t> PrefetchController::LookupHits(PrefetchHandle handle) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(handle);
  if (it == jobs_.end()) return 0;
  return it->second.lookup_hits;
}

std::optional<PrefetchResult> PrefetchController::Wait(PrefetchHandle handle,
                                                       std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (true) {
    auto it = jobs_.find(handle);
    if (it == jobs_.end()) return PrefetchResult{};
    if (it->second.result) {
      const PrefetchResult result = *it->second.result;
      jobs_.erase(it);
      return result;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    landed_.WaitFor(&lock, deadline - now);
  }
}

void PrefetchController::NotifyWhenLanded(PrefetchHandle handle, std::function<void()> landed) {
  {
    MutexLock lock(&mu_);
    auto it = jobs_.find(handle);
    if (it != jobs_.end() && !it->second.result) {
      it->second.on_landed.push_back(std::move(landed));
      return;
    }
  }
  landed();  // unknown (ended, cancelled) or landed already: Poll answers now
}

void PrefetchController::Cancel(PrefetchHandle handle) {
  store::LeaseId release = store::kNoLease;
  // Whoever waits for it hears now: Poll answers "nothing" from here on.
  std::vector<std::function<void()>> landed;
  {
    MutexLock lock(&mu_);
    auto it = jobs_.find(handle);
    if (it == jobs_.end()) return;
    counters_.cancelled.fetch_add(1, std::memory_order_relaxed);
    landed.swap(it->second.on_landed);
    if (it->second.result) {
      release = it->second.result->lease;
      jobs_.erase(it);
    } else if (it->second.queued) {
      queued_ -= 1;  // its pool task finds it gone
      jobs_.erase(it);
    } else {
      it->second.cancelled = true;  // running: Finish releases what it locked
    }
  }
  if (release != store::kNoLease) table_->ReleaseRead(release);
  RunLanded(landed);
}

void PrefetchController::RunLanded(std::vector<std::function<void()>>& landed) {
  for (auto& fn : landed) {
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::error("a prefetch's landing callback failed: {}", e.what());
    }
  }
  landed.clear();
}

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
  store::WriteLease buffers;
  std::size_t usable = 0;
  std::size_t next = 0;
  std::shared_ptr<BatchLoads> batch;
};

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
  try {
    loading = Begin(*running);
  } catch (const std::exception& e) {
    spdlog::error("L2 prefetch failed (the request gets its L1 hits only): {}", e.what());
    ReleaseAfterFailure(*running);
  }
  if (!loading) {
    Finish(running->handle, PrefetchResult{});
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

bool PrefetchController::Begin(Running& running) {
  const PrefetchRequest& request = running.request;
  const std::size_t ranks = std::max<std::size_t>(1, request.ranks);
  // The plan first: what it holds is what a failure from here on releases.
  running.plan = PlanFrom(request, running.found);
  Plan& plan = running.plan;
  ReleaseUnplanned(running.adapters, request, plan);
  counters_.l2_hit_chunks.fetch_add(plan.chunks, std::memory_order_relaxed);
  Publish(running.handle, plan.chunks);
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

void PrefetchController::Publish(PrefetchHandle handle, std::size_t lookup_hits) {
  {
    MutexLock lock(&mu_);
    auto it = jobs_.find(handle);
    if (it != jobs_.end()) it->second.lookup_hits = lookup_hits;
  }
  landed_.NotifyAll();
}

void PrefetchController::Finish(PrefetchHandle handle, PrefetchResult result) {
  store::LeaseId release = store::kNoLease;
  std::optional<std::pair<PrefetchHandle, std::uint64_t>> start;  // a waiting request, its client
  std::vector<std::function<void()>> landed;
  {
    MutexLock lock(&mu_);
    // No longer running from the moment its answer can be seen (Stop waits
    // for the count to reach zero; landed_ is notified below).
    running_ -= 1;
    finishing_ += 1;
    // The first request waiting for a running slot (one still queued: not
    // cancelled, not answered at Stop) starts now.
    while (!start && !waiting_.empty() && !stop_ && running_ < max_running_) {
      auto next = jobs_.find(waiting_.front());
      if (next != jobs_.end() && next->second.queued) {
        start = std::pair(next->first, store::OwnerHash{}(next->second.request.owner));
      }
      waiting_.pop_front();
    }
    // Answered at its deadline already: that answer stays until it is
    // polled, and what the late load locked goes now.
    const bool abandoned = abandoned_.erase(handle) > 0;
    auto it = jobs_.find(handle);
    if (it != jobs_.end() && !abandoned) landed.swap(it->second.on_landed);
    if (abandoned || it == jobs_.end() || it->second.cancelled) {
      release = result.lease;  // nobody will take it
      if (it != jobs_.end() && !abandoned) jobs_.erase(it);
    } else {
      latency_.Record(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                it->second.submitted)
              .count()));
      it->second.lookup_hits = it->second.lookup_hits.value_or(0);
      it->second.result = result;
    }
  }
  if (release != store::kNoLease) table_->ReleaseRead(release);
  // Counted only now: a job counts as completed once nothing of it is left
  // held, so whoever sees the count sees the locks of a cancelled job gone.
  counters_.completed.fetch_add(1, std::memory_order_relaxed);
  landed_.NotifyAll();
  RunLanded(landed);
  if (start) {
    const PrefetchHandle next = start->first;
    // Refused only while stopping: Stop then answers it as never run.
    (void)workers_->Submit(start->second, 0, [this, next] { RunQueued(next); });
  }
  // The last touch of the controller: Stop may return (and the controller
  // go) once this is zero.
  MutexLock lock(&mu_);
  finishing_ -= 1;
  if (finishing_ == 0) landed_.NotifyAll();  // Stop re-checks what it waits for
}

void PrefetchController::AbandonOverdue() {
  const auto now = std::chrono::steady_clock::now();
  // Twice the deadline: a load that is merely slow ends itself at the first
  // batch boundary past it; one still running then is stuck in an adapter.
  const auto overdue = 2 * config_.load_timeout;
  std::vector<std::function<void()>> landed;
  {
    MutexLock lock(&mu_);
    for (auto& [handle, job] : jobs_) {
      if (!job.started || job.result || job.cancelled || now - *job.started < overdue) continue;
      if (abandoned_.contains(handle)) continue;
      abandoned_.insert(handle);
      counters_.abandoned_loads.fetch_add(1, std::memory_order_relaxed);
      latency_.Record(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(now - job.submitted).count()));
      job.lookup_hits = job.lookup_hits.value_or(0);
      job.result = PrefetchResult{};  // no L2 chunks: the lookup's L1 prefix stands
      for (auto& fn : job.on_landed) landed.push_back(std::move(fn));
      job.on_landed.clear();
    }
  }
  if (landed.empty()) return;
  static RateLimitedLog hung_log(std::chrono::seconds(10));
  hung_log.Warn("an L2 load passed --l2-prefetch-load-timeout inside an adapter call; its lookup "
                "was answered with its L1 hits, and its L1 buffers stay reserved until the call "
                "returns");
  landed_.NotifyAll();
  RunLanded(landed);
}

PrefetchControllerStats PrefetchController::Stats() const {
  PrefetchControllerStats s;
  {
    MutexLock lock(&mu_);
    s.queued = queued_;
    s.in_flight = running_;
    s.abandoned_in_flight = abandoned_.size();
  }
  counters_.CopyTo(&s);
  s.latency = latency_.Take();
  return s;
}

LMC_STATS_ROWS(PrefetchControllerStatRows, PrefetchControllerStats, LMC_PREFETCH_STATS)

}  // namespace lmcache::tier
