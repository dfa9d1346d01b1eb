// PrefetchController: loads the chunks a lookup did not find in L1 from the
// L2 adapters, and admits them already read-locked for the lookup's readers
// (reference spec 13.3; the Prefetcher of tier/prefetcher.h).
//
// A request goes through:
//   1. lookup: every adapter is asked which keys it holds (and locks them),
//      at once (SubmitLookup); an adapter that answers from its own thread
//      (the peers) holds no worker meanwhile: the last answer queues the
//      rest of the request on a worker again;
//      the plan takes each key from the first adapter that has it, and the
//      longest prefix of whole chunks (every rank present). LookupHits()
//      answers from here on. The leading chunks the engine holds
//      (held_chunks) leave the plan here, their locks released: hits, never
//      loaded. With a recompute cost (recompute_seconds_per_chunk), the
//      plan ends where loading stops saving time (tier/load_cost.h).
//   2. reserve: L1 buffers for the planned keys (a write lease of ours); the
//      plan shrinks to the leading chunks that got buffers or are resident
//      already (another load brought them in since the lookup: still hits,
//      not loaded again).
//   3. load: chunk batches, in order, each read from its adapter into its
//      buffer; the first chunk that does not load completely, or the
//      deadline (checked between batches), ends the prefix. Every lock is
//      released. A batch that an adapter completes on its own thread (fs
//      through io_uring, the peers over UCX) holds no worker while it is
//      out: its last completion queues the next step on a worker again.
//   4. admit: FinishWriteAndRead keeps the loaded prefix (the rest of the
//      staged buffers are freed) and read-locks it, with the chunks that
//      were resident already, under one lease of the
//      request's owner, `readers` locks each: eviction cannot come between.
// The deadline (load_timeout after the request started to run) also holds
// when an adapter call hangs and the worker never gets back to check it: a
// watch thread answers a request still running at twice its deadline (no
// batch should take as long as a whole deadline) with no L2 chunks (the lookup's L1 prefix stands;
// counted as abandoned), so that no scheduler waits for it for ever. Its L1 buffers stay reserved
// under the controller's own write lease until the adapter call returns
// (fail-stop: a late load writes only into memory nobody else was given);
// what it loaded then is admitted as ordinary L1 objects, locked by nobody.
// At most `max_in_flight` requests run on a worker at once, on a ThreadPool
// of that many threads (common/thread_pool.h), and at most `max_running`
// from lookup to answer (a request waiting for an adapter that completes
// on its own holds no worker, but its L1 buffers and locks); later ones wait in its fair queue, in
// order per owner and round robin across owners. What a queued request holds
// is its keys, which its session's memory budget already bounds; the queue's
// own bounds (max_queued, and max_queued_bytes of keys) answer a request
// beyond them at once with no L2 chunks, counted as refused. A cancelled
// request (its session ended) releases what it locked, now or when it lands;
// one cancelled while it loads stops at its next batch.
// The loads of one batch from different adapters of a cascade run at once:
// a blocking adapter after the first on a thread of a second pool; the
// request goes on once they have all completed (a worker is the tier's
// thread, never a request handler's, docs/threading.md).
//
// The adapters are the cascade's when a request starts to run (an L2Cascade
// View the request holds to its answer): its lookups, loads and unlocks all
// go to the adapters it planned on, so one removed meanwhile finishes the
// requests that began with it (the removal waits for them), and a request
// starting after the change looks up the rest of the cascade only.
//
// Thread-safety: every Prefetcher method from any thread; Start/Stop from the
// owning thread.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "common/histogram.h"
#include "common/mutex.h"
#include "common/periodic_thread.h"
#include "common/thread_pool.h"
#include "store/object_table.h"
#include "tier/l2_adapter.h"
#include "tier/l2_cascade.h"
#include "tier/prefetcher.h"
#include "tier/tier_stats.h"

namespace lmcache::tier {

struct PrefetchControllerConfig {
  unsigned max_in_flight = 8;            // --l2-prefetch-max-in-flight
  // Requests running at once, from lookup to answer, on a worker or with an
  // adapter that completes on its own (a peer's lookup or read, io_uring):
  // each holds L1 buffers and adapter locks. 0 = 4 x max_in_flight.
  std::size_t max_running = 0;
  std::size_t max_queued = 65536;        // requests waiting for a worker
  std::size_t max_queued_bytes = 1ull << 30;  // of their keys
  std::chrono::milliseconds load_timeout{0};  // --l2-prefetch-load-timeout; 0 = none
  std::size_t chunks_per_batch = 4;      // chunks loaded per adapter call
  // ... when every adapter completes on its own (CompletesAsynchronously: fs
  // through io_uring), whose batch is its queue depth: the reads of 32
  // chunks are in flight at once (docs/performance.md, "L2 fs loads").
  std::size_t async_chunks_per_batch = 32;
};

class PrefetchController final : public Prefetcher {
 public:
  // `table` and `cascade` must outlive the controller.
  PrefetchController(store::ObjectTable* table, const L2Cascade* cascade,
                     const PrefetchControllerConfig& config);
  // Over a fixed cascade of `adapters` (which must outlive the controller).
  PrefetchController(store::ObjectTable* table, const std::vector<L2Adapter*>& adapters,
                     const PrefetchControllerConfig& config);
  ~PrefetchController() override;  // stops

  void Start();
  // Queued requests end with nothing loaded; running ones finish.
  void Stop();

  PrefetchHandle Submit(PrefetchRequest request) override;
  std::optional<PrefetchResult> Poll(PrefetchHandle handle) override;
  std::optional<std::size_t> LookupHits(PrefetchHandle handle) override;
  void NotifyWhenLanded(PrefetchHandle handle, std::function<void()> landed) override;
  void Cancel(PrefetchHandle handle) override;
  // Like Poll, but blocks up to `timeout` for the result: for tests and
  // tools only (the service parks its waits instead, prefetcher.h).
  std::optional<PrefetchResult> Wait(PrefetchHandle handle, std::chrono::milliseconds timeout);

  PrefetchControllerStats Stats() const;

 private:
  struct Job {
    PrefetchRequest request;
    std::chrono::steady_clock::time_point submitted;
    std::optional<std::size_t> lookup_hits;
    std::optional<PrefetchResult> result;
    bool cancelled = false;
    bool queued = false;  // waiting for a worker
    std::optional<std::chrono::steady_clock::time_point> started;  // running since
    std::vector<std::function<void()>> on_landed;  // NotifyWhenLanded's, until it lands
  };
  struct Plan;
  struct Running;

  // A pool task: submits the lookups of `handle` unless it was cancelled or
  // answered meanwhile.
  void RunQueued(PrefetchHandle handle) LMC_EXCLUDES(mu_);
  // One lookup of `running` answered (or the submitting worker done
  // submitting); the last goes on with Continue, on a worker.
  void LookedUp(const std::shared_ptr<Running>& running, bool on_worker) LMC_EXCLUDES(mu_);
  // Ends a request that will never run with nothing loaded; false if it
  // was no longer waiting. Its landing callbacks go to `landed`.
  bool AnswerUnrun(Job& job, std::vector<std::function<void()>>& landed) LMC_REQUIRES(mu_);
  // Plans, reserves and loads what the lookups found (on a worker).
  void Continue(const std::shared_ptr<Running>& running) LMC_EXCLUDES(mu_);
  // The plan and the L1 buffers; false when nothing is to be loaded (every
  // lock released, nothing reserved).
  bool Begin(Running& running) LMC_EXCLUDES(mu_);
  // Cuts the planned chunks the engine holds (PrefetchRequest::held_chunks)
  // from the request, their adapter locks released: found, never loaded;
  // Finish adds them to the answer.
  void DropHeldChunks(Running& running);
  // The load-or-recompute policy (PrefetchRequest::recompute_seconds_per_chunk,
  // tier/load_cost.h): cuts the plan to the prefix whose load saves time,
  // the rest's adapter locks released; counted per adapter.
  void DeclineSlowerThanRecompute(Running& running);
  // Submits batch after batch until one completes on an adapter's own
  // thread (BatchLoaded goes on from there), the prefix ends, or the
  // deadline passes; then Complete.
  void LoadBatches(const std::shared_ptr<Running>& running) LMC_EXCLUDES(mu_);
  bool Cancelled(PrefetchHandle handle) const LMC_EXCLUDES(mu_);
  struct BatchLoads;
  // Every adapter's reads of the next batch, at once (the first adapter's
  // on this thread, a blocking one after it on the cascade pool).
  void SubmitBatch(const std::shared_ptr<Running>& running);
  // The pool for a cascade's loads after its first adapter's, made when a
  // request first needs it: max_in_flight threads per adapter after the
  // first of that request's cascade.
  ThreadPool* CascadePool(std::size_t adapters);
  // From an adapter's thread: queues `next` on a worker, or runs `refused`
  // here when it cannot be queued (stopping, the queue full).
  void HandOff(const std::shared_ptr<Running>& running, std::function<void()> next,
               std::function<void()> refused) LMC_EXCLUDES(mu_);
  // The batch's last completion, on an adapter's thread: queues the rest
  // on a worker.
  void BatchLoaded(const std::shared_ptr<Running>& running) LMC_EXCLUDES(mu_);
  // Reads the completed batch's outcomes: true to go on, false when the
  // prefix ended there (the request is then completed).
  bool TakeBatch(Running& running) LMC_EXCLUDES(mu_);
  // Admits the first `loaded` chunks and answers the request.
  void Complete(Running& running, std::size_t loaded) LMC_EXCLUDES(mu_);
  PrefetchResult Admit(Running& running, std::size_t loaded);
  // `deadline`: when the load stops at the next batch (load_timeout after
  // the request started to run), or nullopt without a load_timeout.
  using Deadline = std::optional<std::chrono::steady_clock::time_point>;
  // Each key's source (its first adapter that found it) and the prefix of
  // whole chunks; every lock the lookups took is in `locked`.
  static Plan PlanFrom(const PrefetchRequest& request, const std::vector<std::vector<bool>>& found);
  // Releases the locks the plan does not load from; they leave
  // `plan.locked` before their adapter's Unlock is called (one that throws
  // is never retried: a second unlock could end another request's lock).
  static void ReleaseUnplanned(const std::vector<L2Adapter*>& adapters,
                               const PrefetchRequest& request, Plan& plan);
  // After Begin threw: releases what the plan still holds (every adapter's
  // locks, each adapter's Unlock guarded; the L1 buffers).
  void ReleaseAfterFailure(Running& running);
  // Per key of the first `keys` of the plan, whether its source serves it
  // once (L2Adapter::KeepsLoadedObjects false); empty when none does.
  static std::vector<bool> ServedOnce(const std::vector<L2Adapter*>& adapters, const Plan& plan,
                                      std::size_t keys);
  void Publish(PrefetchHandle handle, std::size_t lookup_hits) LMC_EXCLUDES(mu_);
  // Answers a running request (it no longer counts as running from the
  // moment its answer can be seen) and runs its landing callbacks.
  void Finish(PrefetchHandle handle, PrefetchResult result) LMC_EXCLUDES(mu_);
  // Answers every running request past its deadline by a watch period (the
  // watch thread; docs/threading.md).
  void AbandonOverdue() LMC_EXCLUDES(mu_);
  // Runs the callbacks taken out of ended jobs (no lock held).
  static void RunLanded(std::vector<std::function<void()>>& landed) LMC_EXCLUDES(mu_);

  store::ObjectTable* const table_;
  std::unique_ptr<L2Cascade> fixed_;  // the second constructor's
  const L2Cascade* const cascade_;
  const PrefetchControllerConfig config_;
  const std::size_t max_running_;  // config.max_running, or its default
  // The writer of one request's L1 buffers: internal:<1 + handle>, one per
  // request. Requests must never share one: a re-reservation of a key by the
  // same writer hands its staged buffer back, so a request loading a chunk
  // another one still loads would take over that buffer, and the other's
  // late load would land in memory that had meanwhile gone to another object.
  static store::Owner LoaderOf(PrefetchHandle handle) { return store::Owner::Internal(1 + handle); }

  mutable Mutex mu_;
  CondVar landed_;   // a request progressed (lookup done, result in)
  std::map<PrefetchHandle, Job> jobs_ LMC_GUARDED_BY(mu_);
  PrefetchHandle next_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t queued_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t running_ LMC_GUARDED_BY(mu_) = 0;
  // Requests in Finish after their answer was published: Stop waits for
  // them too, as they still touch the controller.
  std::uint64_t finishing_ LMC_GUARDED_BY(mu_) = 0;
  // Requests taken from the pool's queue while max_in_flight were running:
  // still queued, started by Finish in this order.
  std::deque<PrefetchHandle> waiting_ LMC_GUARDED_BY(mu_);
  // Adapter threads inside HandOff: Stop waits for them as well.
  std::uint64_t handoffs_ LMC_GUARDED_BY(mu_) = 0;
  bool stop_ LMC_GUARDED_BY(mu_) = false;
  std::unique_ptr<ThreadPool> workers_;   // max_in_flight threads, from Start
  std::once_flag cascade_pool_once_;
  std::unique_ptr<ThreadPool> cascade_pool_;  // CascadePool's
  std::unique_ptr<PeriodicThread> watch_;  // with a load_timeout only
  // Running requests answered at their deadline (AbandonOverdue): what their
  // Run returns later is released, never published.
  std::set<PrefetchHandle> abandoned_ LMC_GUARDED_BY(mu_);

  PrefetchControllerCounters counters_;  // and the latency histogram
};

}  // namespace lmcache::tier
