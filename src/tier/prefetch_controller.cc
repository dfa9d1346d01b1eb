#include "tier/prefetch_controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/logging.h"
#include "tier/prefetch_controller_parts.h"

namespace lmcache::tier {

using prefetch_parts::UnlockAt;
using prefetch_parts::UnlockFrom;

namespace {

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
      counters_.latency.RecordSince(it->second.submitted);
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
      counters_.latency.RecordSince(job.submitted, now);
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
  return s;
}

LMC_STATS_ROWS(PrefetchControllerStatRows, PrefetchControllerStats, LMC_PREFETCH_STATS)

}  // namespace lmcache::tier
