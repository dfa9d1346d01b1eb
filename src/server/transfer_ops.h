// TransferOps: the engine-driven context and the shared-memory transfer path
// (spec 11): register/unregister_kv_cache_engine_driven_context,
// prepare_store / commit_store / abort_store, prepare_retrieve / commit_retrieve.
//
// A worker copies bytes itself, into and out of slots of the pool segment.
// Its leases are exact (docs/threading.md): a prepare_store stages under one
// write lease that its commit_store admits; a prepare_retrieve holds one read
// lease of its own for exactly the objects it returned (consuming its share
// of the request's lookup locks, or locking afresh where the lookup's lease
// expired) that its commit_retrieve releases. A prepare's lease is recorded
// with the registration that made it, or the prepare fails and releases it.
//
// Thread-safety: the handlers may run on any threads at once; what they
// share is in TransferDeps (transfer_mode.h).
#pragma once

#include "server/op_table.h"
#include "server/reserve_or_park.h"
#include "server/transfer_target.h"
#include "server/transfer_mode.h"

namespace lmcache::server {

class TransferOps final : public TransferMode {
 public:
  TransferOps(const TransferDeps& deps, bool serving) : TransferMode(serving), deps_(deps) {}
  std::string_view name() const override { return "engine_driven"; }
  std::vector<std::string> features() const override { return {"shm", "engine_driven"}; }
  void AddTo(OpTable* table) override;

 private:
  using TransferArgs = TransferTarget;
  Result<TransferArgs> DecodeTransfer(Payloads p) const;

  Result<std::string> RegisterContext(const RequestContext& context, const EngineContext& engine);
  Result<std::string> UnregisterContext(const RequestContext& context, std::int64_t instance_id);
  // Waits for pre-faulted pages without a thread (reserve_or_park.h).
  Attempted PrepareStore(const RequestContext& context, const TransferArgs& args,
                         store::WhilePoolWarms warming);
  Result<std::string> CommitStore(const RequestContext& context, const TransferArgs& args);
  // The prepare_store pending for this key and instance, taken out (nullopt: none).
  Result<std::optional<worker::PendingWrite>> TakePendingWrite(const RequestContext& context,
                                                       const TransferArgs& args);
  // Gives back a prepared store's write lease without admitting anything.
  Result<std::string> AbortStore(const RequestContext& context, const TransferArgs& args);
  Result<std::string> PrepareRetrieve(const RequestContext& context, const TransferArgs& args);
  Result<std::string> CommitRetrieve(const RequestContext& context, const TransferArgs& args);

  const TransferDeps deps_;
};

}  // namespace lmcache::server
