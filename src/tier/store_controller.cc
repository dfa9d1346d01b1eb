#include "tier/store_controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace lmcache::tier {

StoreController::StoreController(store::ObjectTable* table, const L2Cascade* cascade,
                                 const StoreControllerConfig& config)
    : table_(table), cascade_(cascade), config_(config) {}

StoreController::StoreController(store::ObjectTable* table,
                                 const std::vector<L2Adapter*>& adapters,
                                 const StoreControllerConfig& config)
    : table_(table),
      fixed_(L2Cascade::Borrowing(adapters)),
      cascade_(fixed_.get()),
      config_(config) {}

StoreController::~StoreController() { Stop(); }

void StoreController::Start() {
  MutexLock lock(&mu_);
  if (pool_ || stop_) return;
  pool_ = std::make_unique<ThreadPool>("l2-store", std::max(1u, config_.workers), FairQueueLimits{});
  AddDrainersLocked();  // what was admitted before the start is written now
}

void StoreController::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    counters_.dropped_at_stop.fetch_add(queue_.size(), std::memory_order_relaxed);
    queue_.clear();
    queued_bytes_ = 0;
  }
  // Outside mu_: the drainers finish their batch in hand and take mu_ to end.
  // No one submits after stop_, so pool_ is not touched concurrently.
  if (ThreadPool* pool = pool_.get()) pool->Stop();
  idle_.NotifyAll();
}

void StoreController::AddDrainersLocked() {
  if (!pool_ || stop_) return;
  while (drainers_ < std::max(1u, config_.workers) && drainers_ < queue_.size()) {
    if (pool_->Submit(0, 0, [this] { Drain(); }) != FairQueue::Admission::kQueued) return;
    drainers_ += 1;
  }
}

void StoreController::OnAdmitted(std::span<const store::ObjectKey> keys,
                                 std::span<const std::uint64_t> bytes,
                                 store::AdmissionSource source) {
  if (source == store::AdmissionSource::kTier) return;  // it came from L2
  // With the peers alone (or no adapter), no object is stored anywhere, so
  // none may count as stored (nor leave L1 under skip_l1).
  if (!cascade_->TakesStores()) return;
  MutexLock lock(&mu_);
  if (stop_) return;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (queue_.size() >= config_.max_queue_objects ||
        queued_bytes_ + bytes[i] > config_.max_queue_bytes) {
      counters_.skipped_queue_full.fetch_add(keys.size() - i, std::memory_order_relaxed);
      break;
    }
    queue_.push_back({keys[i], bytes[i]});
    queued_bytes_ += bytes[i];
  }
  AddDrainersLocked();
}

void StoreController::Drain() {
  while (true) {
    std::vector<Pending> batch;
    {
      MutexLock lock(&mu_);
      if (stop_ || queue_.empty()) {
        drainers_ -= 1;
        return;
      }
      while (!queue_.empty() && batch.size() < config_.batch_objects) {
        queued_bytes_ -= queue_.front().bytes;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      in_flight_ += batch.size();
    }
    const std::size_t n = batch.size();
    WriteBatch(std::move(batch));
    MutexLock lock(&mu_);
    in_flight_ -= n;
    if (queue_.empty() && in_flight_ == 0) idle_.NotifyAll();
  }
}

void StoreController::WriteBatch(std::vector<Pending> batch) {
  // Read-lock what is still resident, all under one lease of ours.
  store::LeaseId lease = store::kNoLease;
  std::vector<store::ObjectKey> keys;
  std::vector<L2Write> writes;
  keys.reserve(batch.size());
  for (Pending& p : batch) keys.push_back(std::move(p.key));
  writes.reserve(keys.size());
  std::vector<store::ObjectKey> locked;
  for (const store::ObjectKey& key : keys) {
    store::ReadRequest request;
    request.keys = std::span(&key, 1);
    request.owner = owner_;
    request.extend = lease;
    auto acquired = table_->AcquireRead(request);
    if (!acquired.ok() || acquired->granted == 0) {
      counters_.skipped_gone.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    lease = acquired->lease;
    const store::ReadGrant& grant = acquired->grants[0];
    auto bytes = table_->LeasedBytes(grant.offset, grant.size);
    if (!bytes.ok()) {  // cannot happen for a granted object; counted, never fatal
      counters_.failed.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    writes.push_back({&key, *bytes, {}});
  }
  // The cascade as it is now, held until every adapter has its copy (one
  // being removed meanwhile finishes this batch).
  const L2Cascade::View cascade = cascade_->Current();
  std::vector<bool> everywhere(writes.size(), true);
  bool stored_anywhere = false;
  for (std::size_t a = 0; a < cascade.size(); ++a) {
    if (!cascade.adapter(a).TakesStores()) continue;  // a source only read (the peers)
    stored_anywhere = true;
    const std::vector<Status> results = cascade.adapter(a).Store(writes);
    std::vector<store::ObjectKey> stored;
    for (std::size_t i = 0; i < writes.size(); ++i) {
      if (!results[i].ok()) {
        everywhere[i] = false;
      } else if (observer_ != nullptr) {
        stored.push_back(*writes[i].key);
      }
    }
    if (observer_ != nullptr && !stored.empty()) {
      observer_->OnL2Stored(cascade.member(a).description, stored);
    }
  }
  // The last adapter taking stores left since these were queued: they were
  // stored nowhere.
  if (!stored_anywhere) std::fill(everywhere.begin(), everywhere.end(), false);
  std::vector<store::ObjectKey> done;
  for (std::size_t i = 0; i < writes.size(); ++i) {
    if (everywhere[i]) {
      done.push_back(*writes[i].key);
    } else {
      counters_.failed.fetch_add(1, std::memory_order_relaxed);
    }
  }
  counters_.stored.fetch_add(done.size(), std::memory_order_relaxed);
  if (lease != store::kNoLease) table_->ReleaseRead(lease);
  if (config_.policy == StorePolicy::kSkipL1 && !done.empty()) {
    for (const store::DeleteOutcome outcome : table_->Delete(done, /*force=*/false)) {
      if (outcome == store::DeleteOutcome::kDeleted) counters_.deleted_from_l1.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

bool StoreController::WaitIdle(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (!queue_.empty() || in_flight_ > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    idle_.WaitFor(&lock, deadline - now);
  }
  return true;
}

StoreControllerStats StoreController::Stats() const {
  StoreControllerStats s;
  {
    MutexLock lock(&mu_);
    s.queued_objects = queue_.size();
    s.queued_bytes = queued_bytes_;
    s.in_flight = in_flight_;
  }
  counters_.CopyTo(&s);
  return s;
}

LMC_STATS_ROWS(StoreControllerStatRows, StoreControllerStats, LMC_L2_STORE_STATS)

}  // namespace lmcache::tier
