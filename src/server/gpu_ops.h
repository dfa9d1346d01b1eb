// GpuOps: the CUDA-IPC transfer mode ("lmcache_driven", spec 3.2, 3.3, 10;
// ../shared/reference/gpu-registration.md): register_kv_cache,
// unregister_kv_cache, store and retrieve, where the server itself copies
// between a worker's paged GPU KV cache and L1.
//
// A GPU registration is an instance registration like the engine-driven one
// (same identity, liveness, reaper and lock rules) whose object layout comes
// from its tensors (gpu/kv_layout.h): one part per KV group, in the layout
// namespace its format implies, so bytes in one order are never served to a
// client of another. Layouts the engine-driven path shares ([2, L, T, hidden],
// MLA [L, T, C]) keep namespace 0 and both paths read each other's objects.
// The device backend and its contexts (gpu::GpuContexts) are made at the first
// register_kv_cache.
//
// store reserves the new chunks it can store (transfer_plan.h) under a
// write lease of the registration's device owner (pinned: it never expires
// under a copy), queues the gather, and answers with the server's event at
// once; the objects are published only from the transfer's completion, and
// dropped if it failed. retrieve takes every chunk or none under a read
// lease of the device owner (consuming the lookup's share, as
// prepare_retrieve does), queues the scatter, and releases the lease from
// the completion. Short block lists, ids outside the cache and missing
// chunks fail closed before anything is queued. A failed store or retrieve
// of a registered worker answers [a completed server event, false], since
// reference clients import whatever handle comes back; before a worker's
// context is known it answers [b"", false].
//
// Thread-safety: the handlers may run on any threads at once; completions
// run on the backend's threads and touch only the object table.
#pragma once

#include <memory>

#include "common/mutex.h"
#include "protocol/gpu_messages.h"
#include "gpu/gpu_contexts.h"
#include "server/op_table.h"
#include "server/reserve_or_park.h"
#include "server/transfer_target.h"
#include "server/transfer_mode.h"

namespace lmcache::server {

class GpuOps final : public TransferMode {
 public:
  GpuOps(const TransferDeps& deps, bool serving) : TransferMode(serving), deps_(deps) {}
  std::string_view name() const override { return "lmcache_driven"; }
  std::vector<std::string> features() const override { return {"lmcache_driven", "cuda_ipc"}; }
  void AddTo(OpTable* table) override;
  void OnRegistrationGone(std::uint64_t registration) override;
  void AddStats(StatsSnapshot* stats) const override;
  std::optional<std::string> Problem() const override;
  // A GPU registration maps the worker's device memory into this process.
  bool BoundToProcess(std::uint64_t registration) const override;

 private:
  struct TransferArgs {
    TransferTarget target;
    protocol::GroupBlockIds block_ids;
    gpu::EventHandle engine_event{};
    std::int64_t skip_tokens = 0;  // retrieve only
  };
  Result<TransferArgs> DecodeTransfer(Payloads p) const;

  // The backend's contexts, made at first use.
  Result<gpu::GpuContexts*> Contexts() LMC_EXCLUDES(mu_);
  gpu::GpuContexts* ContextsIfMade() const LMC_EXCLUDES(mu_);

  Result<std::string> Register(const RequestContext& context,
                               const protocol::KvCacheRegistration& registration);
  Result<std::string> RegisterChecked(const RequestContext& context,
                                      const protocol::KvCacheRegistration& registration,
                                      bool* context_owns_tensors);
  Result<std::string> Unregister(const RequestContext& context, std::int64_t instance_id);
  // Waits for pre-faulted pages without a thread (reserve_or_park.h).
  Attempted Store(const RequestContext& context, const TransferArgs& args,
                  store::WhilePoolWarms warming);
  OpResult Retrieve(const RequestContext& context, const TransferArgs& args);

  // The registration's device context and the objects its transfer names,
  // checked; `entry` is set as soon as it is known (a failure after it
  // answers with a real event).
  struct Transfer {
    worker::WorkerKeys worker;  // one key per chunk of the range, on the worker's rank
    std::shared_ptr<gpu::GpuContexts::Entry> entry;
    std::int64_t chunks() const { return static_cast<std::int64_t>(worker.keys.size()); }
  };
  Status Begin(const RequestContext& context, const TransferArgs& args, worker::KeyUse use,
               Transfer* transfer);
  // The reply of a failed transfer: a completed server event where there is a context.
  static OpResult Failed(const std::shared_ptr<gpu::GpuContexts::Entry>& entry, const Status& status);

  const TransferDeps deps_;
  mutable Mutex mu_;
  std::unique_ptr<gpu::GpuContexts> contexts_ LMC_GUARDED_BY(mu_);
};

}  // namespace lmcache::server
