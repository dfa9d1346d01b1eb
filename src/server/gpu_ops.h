// GpuOps: the CUDA-IPC transfer family (spec 3.2, 3.3, 10): register_kv_cache,
// unregister_kv_cache, store and retrieve, where the server itself copies
// between a worker's paged GPU KV cache and L1.
//
// A GPU registration is an instance registration like the engine-driven one
// (same identity, liveness, reaper and lock rules, same object layout
// [2, L, chunk, hidden] so both paths share objects), plus a device context
// (GpuContexts) made from the worker's tensors. store reserves the new chunks
// under a write lease of the registration's device owner, queues the gather,
// and answers with the server's event at once; the objects are published
// only from the transfer's completion, and dropped if it failed. retrieve
// takes every chunk or none under a read lease of the device owner (consuming
// the lookup's share, as prepare_retrieve does), queues the scatter, and
// releases the lease from the completion. Short block lists, ids outside the
// cache and missing chunks fail closed before anything is queued.
//
// Thread-safety: the handlers may run on any threads at once; completions
// run on the backend's threads and touch only the object table.
#pragma once

#include "protocol/gpu_messages.h"
#include "server/op_table.h"
#include "server/service_state.h"

namespace lmcache::server {

class GpuOps {
 public:
  explicit GpuOps(ServiceState* state) : state_(state) {}
  void AddTo(OpTable* table);

 private:
  struct TransferArgs {
    IpcKey key;
    std::int64_t instance_id = 0;
    std::vector<std::int32_t> block_ids;
    gpu::EventHandle engine_event{};
    std::int64_t skip_tokens = 0;  // retrieve only
  };
  Result<TransferArgs> DecodeTransfer(Payloads p) const;

  Result<std::string> Register(const RequestContext& context,
                               const protocol::KvCacheRegistration& registration);
  Result<std::string> Unregister(const RequestContext& context, std::int64_t instance_id);
  Result<std::string> Store(const RequestContext& context, const TransferArgs& args);
  Result<std::string> Retrieve(const RequestContext& context, const TransferArgs& args);

  // The registration's device context and the blocks its transfer names, checked.
  struct Transfer {
    WorkerKeys worker;
    std::shared_ptr<GpuContexts::Entry> entry;
  };
  Result<Transfer> Begin(const RequestContext& context, const TransferArgs& args);
  // The chunks' block ids, tokens and objects (pool offsets) of a transfer.
  std::vector<gpu::ChunkTransfer> Chunks(const Transfer& transfer, const TransferArgs& args,
                                         std::span<const std::size_t> chunk_indices,
                                         std::span<const store::Offset> offsets) const;

  ServiceState* const state_;
};

}  // namespace lmcache::server
