#include "gpu/gpu_contexts.h"

#include <spdlog/spdlog.h>

namespace lmcache::gpu {

Result<EventHandle> GpuContexts::Entry::Enqueue(Direction direction,
                                                      const EventHandle& engine_event,
                                                      std::vector<ChunkTransfer> chunks,
                                                      std::function<void(const Status&)> done) {
  MutexLock lock(&mu_);
  if (retired_ || !context_) {
    const Status gone(ErrorCode::kNotRegistered, "the GPU registration went before the transfer started");
    done(gone);
    return gone;
  }
  return context_->Enqueue(direction, engine_event, std::move(chunks), std::move(done));
}

Result<EventHandle> GpuContexts::Entry::FailedEvent() {
  MutexLock lock(&mu_);
  if (!context_) return Status(ErrorCode::kNotRegistered, "the GPU context is closed");
  return context_->FailedEvent();
}

std::optional<std::string> GpuContexts::Problem() const {
  if (!backend_.ok()) return std::nullopt;  // every registration says why
  return (*backend_)->Problem();
}

GpuContexts::GpuContexts(const std::string& backend, std::chrono::milliseconds event_timeout)
    : backend_(MakeKvBackend(backend, BackendOptions{event_timeout})),
      closer_("gpu-closer", std::chrono::milliseconds(20), [this] { CloseDrained(); }) {
  closer_.Start();
}

GpuContexts::~GpuContexts() {
  closer_.Stop();
  std::vector<std::shared_ptr<Entry>> all;
  {
    MutexLock lock(&mu_);
    for (auto& [registration, entry] : active_) all.push_back(entry);
    all.insert(all.end(), closing_.begin(), closing_.end());
    active_.clear();
    closing_.clear();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (const std::shared_ptr<Entry>& entry : all) {
    MutexLock lock(&entry->mu_);
    entry->retired_ = true;
    if (!entry->context_) continue;
    const auto left = std::max(std::chrono::steady_clock::duration::zero(),
                               deadline - std::chrono::steady_clock::now());
    if (entry->context_->Drain(std::chrono::duration_cast<std::chrono::milliseconds>(left))) {
      entry->context_.reset();
    } else {
      // Unmapping under a running copy would corrupt; the process exits anyway.
      spdlog::error("a GPU context did not drain at shutdown; left mapped");
      static_cast<void>(entry->context_.release());
    }
  }
}

Result<KvBackend*> GpuContexts::backend() {
  if (!backend_.ok()) return backend_.status();
  return backend_->get();
}

void GpuContexts::Add(std::uint64_t registration, std::shared_ptr<Entry> entry) {
  MutexLock lock(&mu_);
  active_[registration] = std::move(entry);
}

std::shared_ptr<GpuContexts::Entry> GpuContexts::Find(std::uint64_t registration) const {
  MutexLock lock(&mu_);
  const auto it = active_.find(registration);
  return it == active_.end() ? nullptr : it->second;
}

void GpuContexts::Retire(std::uint64_t registration) {
  std::shared_ptr<Entry> entry;
  {
    MutexLock lock(&mu_);
    const auto it = active_.find(registration);
    if (it == active_.end()) return;
    entry = std::move(it->second);
    active_.erase(it);
    closing_.push_back(entry);
  }
  {
    MutexLock lock(&entry->mu_);
    entry->retired_ = true;  // nothing new is queued; what is queued still runs
  }
  closer_.Nudge();
}

void GpuContexts::CloseDrained() {
  std::vector<std::shared_ptr<Entry>> closing;
  {
    MutexLock lock(&mu_);
    closing = closing_;
  }
  std::vector<Entry*> closed;
  for (const std::shared_ptr<Entry>& entry : closing) {
    MutexLock lock(&entry->mu_);
    if (entry->context_ && !entry->context_->Drain(std::chrono::milliseconds(0))) continue;
    entry->context_.reset();  // its mappings close here, after its last copy
    closed.push_back(entry.get());
  }
  MutexLock lock(&mu_);
  std::erase_if(closing_, [&](const std::shared_ptr<Entry>& e) {
    return std::find(closed.begin(), closed.end(), e.get()) != closed.end();
  });
  const auto now = std::chrono::steady_clock::now();
  if (!closing_.empty() && now - stuck_logged_ > std::chrono::seconds(10)) {
    stuck_logged_ = now;
    spdlog::warn("{} GPU contexts of departed workers wait for their copies to drain before "
                 "their memory is unmapped",
                 closing_.size());
  }
}

GpuStats GpuContexts::Stats() const {
  GpuStats s;
  std::vector<std::shared_ptr<Entry>> entries;
  {
    MutexLock lock(&mu_);
    s.contexts = active_.size();
    s.closing = closing_.size();
    for (const auto& [registration, entry] : active_) entries.push_back(entry);
    entries.insert(entries.end(), closing_.begin(), closing_.end());
  }
  for (const std::shared_ptr<Entry>& entry : entries) {
    MutexLock lock(&entry->mu_);
    if (entry->context_) s.transfers_in_flight += entry->context_->in_flight();
  }
  if (backend_.ok()) {
    const BackendStats backend = (*backend_)->Stats();
    s.mapped_allocations = backend.mapped_allocations;
    s.mapped_bytes = backend.mapped_bytes;
  }
  return s;
}

LMC_STATS_ROWS(GpuStatRows, GpuStats, LMC_GPU_STATS)

}  // namespace lmcache::gpu
