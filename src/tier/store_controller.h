// StoreController: writes objects that clients store into L1 behind, to
// every L2 adapter (reference spec 13.2).
//
// The adapters are the cascade's at the moment a batch is taken (an
// L2Cascade View held until the batch is written): an adapter added at
// runtime receives what is admitted from then on, and one being removed
// finishes the batches that began with it. While no adapter of the cascade
// takes stores (none, or the peers alone), admissions are not queued.
//
// It listens to the table's admissions of client writes (objects that came
// from L2 are not written back) and queues them, bounded in objects and
// bytes: when L2 falls behind, new objects are skipped and counted, and the
// request path never waits. Worker threads take batches, read-lock each
// object still resident under the controller's own owner (one lease per
// batch), hand the bytes to each adapter, and release the lease. Policy
// `skip_l1` then deletes from L1 what every adapter stored (L1 as a buffer).
// Failures are counted (here and per adapter) and not retried.
//
// Threads: a ThreadPool of `workers` threads (common/thread_pool.h). An
// admission that finds fewer than `workers` drainers running hands the pool
// more, one per queued object at most; a drainer writes batches until the
// queue is empty, then ends
// (decided under the controller's mutex, so no admission goes unseen).
// Stop() lets each drainer finish the batch in hand, drops what is queued
// (counted), and leaves no lock behind. Start once; Stop is final.
//
// Thread-safety: the listener callback and the accessors from any thread;
// Start/Stop from the owning thread.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "common/thread_pool.h"
#include "store/listener.h"
#include "store/object_table.h"
#include "tier/l2_adapter.h"
#include "tier/l2_cascade.h"
#include "tier/l2_event_observer.h"
#include "tier/tier_stats.h"

namespace lmcache::tier {

enum class StorePolicy : std::uint8_t {
  kDefault,  // every object to every adapter, kept in L1
  kSkipL1,   // every adapter, then deleted from L1
};

struct StoreControllerConfig {
  StorePolicy policy = StorePolicy::kDefault;
  unsigned workers = 2;
  std::size_t batch_objects = 16;
  std::uint64_t max_queue_objects = 65536;
  std::uint64_t max_queue_bytes = 4ull << 30;
};

class StoreController final : public store::StoreListener {
 public:
  // `table` and `cascade` must outlive the controller.
  StoreController(store::ObjectTable* table, const L2Cascade* cascade,
                  const StoreControllerConfig& config);
  // Over a fixed cascade of `adapters` (which must outlive the controller).
  StoreController(store::ObjectTable* table, const std::vector<L2Adapter*>& adapters,
                  const StoreControllerConfig& config);
  ~StoreController() override;  // stops

  // Told what each adapter stored (set once, before Start; may be null).
  void SetEventObserver(L2EventObserver* observer) { observer_ = observer; }
  void Start();
  void Stop();
  // Waits until nothing is queued or in flight, up to `timeout`; true if idle.
  bool WaitIdle(std::chrono::milliseconds timeout);
  StoreControllerStats Stats() const;

  void OnAdmitted(std::span<const store::ObjectKey> keys, std::span<const std::uint64_t> bytes,
                  store::AdmissionSource source) override;
  void OnEvicted(std::span<const store::ObjectKey>, std::span<const std::uint64_t>) override {}
  void OnDeleted(std::span<const store::ObjectKey>, std::span<const std::uint64_t>) override {}

 private:
  struct Pending {
    store::ObjectKey key;
    std::uint64_t bytes;
  };
  // Hands the pool drainers until `workers` run or there is one per queued
  // object (or the pool refuses one: it stops).
  void AddDrainersLocked() LMC_REQUIRES(mu_);
  // A pool task: writes batches until the queue is empty or the controller stops.
  void Drain() LMC_EXCLUDES(mu_);
  void WriteBatch(std::vector<Pending> batch);

  store::ObjectTable* const table_;
  std::unique_ptr<L2Cascade> fixed_;  // the second constructor's
  const L2Cascade* const cascade_;
  L2EventObserver* observer_ = nullptr;
  const StoreControllerConfig config_;
  const store::Owner owner_ = store::Owner::Internal(1);

  mutable Mutex mu_;
  CondVar idle_;  // the queue and the batches in hand emptied
  std::deque<Pending> queue_ LMC_GUARDED_BY(mu_);
  std::uint64_t queued_bytes_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t in_flight_ LMC_GUARDED_BY(mu_) = 0;
  bool stop_ LMC_GUARDED_BY(mu_) = false;
  unsigned drainers_ LMC_GUARDED_BY(mu_) = 0;  // Drain tasks queued or running
  // Set by Start under mu_; then used only under mu_ (Submit takes the
  // pool's queue mutex, a leaf) until Stop stops it outside mu_.
  std::unique_ptr<ThreadPool> pool_;

  StoreControllerCounters counters_;
};

}  // namespace lmcache::tier
