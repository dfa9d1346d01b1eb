// GpuContexts: the device backend of the CUDA-IPC path, the device context
// (KvContext) of each GPU registration, and the closing of those whose
// registration went. GpuOps makes it at the first register_kv_cache.
//
// A registration's context is retired when the registration goes (unregister,
// the reaper, a re-registration from another connection, its connection
// closing: InstanceRules::ReleaseInstance). Retiring never waits: from then on
// nothing new is queued on it, and the closer thread destroys it once its
// stream has drained, which closes its IPC mappings. A context whose stream
// does not drain (an engine event that never completes) stays open and is
// logged, rather than unmapping memory a copy may still use (field notes
// #4676, #4980: unmapped only after the copies, and then always).
//
// Thread-safety: every member may be called from any thread. Lock order:
// GpuContexts::mu_, then an Entry's mu (Enqueue holds only the Entry's).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_stats.h"
#include "common/mutex.h"
#include "common/periodic_thread.h"
#include "gpu/kv_backend.h"
#include "gpu/kv_layout.h"

namespace lmcache::gpu {

class GpuContexts {
 public:
  // One registration's context and the layout it was registered with.
  class Entry {
   public:
    Entry(KvLayout layout, std::unique_ptr<KvContext> context)
        : layout_(std::move(layout)), context_(std::move(context)) {}
    const KvLayout& layout() const { return layout_; }
    // Queues a transfer unless the registration went meanwhile (kNotRegistered).
    Result<EventHandle> Enqueue(Direction direction, const EventHandle& engine_event,
                                     std::vector<ChunkTransfer> chunks,
                                     std::function<void(const Status&)> done) LMC_EXCLUDES(mu_);
    // A completed (failed, where the backend can say so) server event.
    Result<EventHandle> FailedEvent() LMC_EXCLUDES(mu_);

   private:
    friend class GpuContexts;
    const KvLayout layout_;
    Mutex mu_;
    std::unique_ptr<KvContext> context_ LMC_GUARDED_BY(mu_);
    bool retired_ LMC_GUARDED_BY(mu_) = false;
  };

  GpuContexts(const std::string& backend, std::chrono::milliseconds event_timeout);
  ~GpuContexts();  // drains what it can for a few seconds; leaks what does not drain

  // The backend, or the reason there is none.
  Result<KvBackend*> backend();
  // The backend's fault, for health.
  std::optional<std::string> Problem() const;
  void Add(std::uint64_t registration, std::shared_ptr<Entry> entry) LMC_EXCLUDES(mu_);
  std::shared_ptr<Entry> Find(std::uint64_t registration) const LMC_EXCLUDES(mu_);
  void Retire(std::uint64_t registration) LMC_EXCLUDES(mu_);
  GpuStats Stats() const LMC_EXCLUDES(mu_);

 private:
  void CloseDrained() LMC_EXCLUDES(mu_);

  Result<std::unique_ptr<KvBackend>> backend_;
  mutable Mutex mu_;
  std::map<std::uint64_t, std::shared_ptr<Entry>> active_ LMC_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Entry>> closing_ LMC_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point stuck_logged_ LMC_GUARDED_BY(mu_);
  PeriodicThread closer_;  // last: runs against the members above
};

}  // namespace lmcache::gpu
