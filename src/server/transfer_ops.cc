#include "server/transfer_ops.h"

#include <spdlog/spdlog.h>

#include "common/logging.h"

namespace lmcache::server {
namespace {

SlotDescriptor Slot(const worker::ChunkLayout& layout, store::Offset offset) {
  return {offset, layout.object_bytes, layout.shape, layout.dtype};
}

Result<EngineContext> DecodeShmRegistration(Payloads p) {
  return protocol::DecodeEngineContext(p[0]);
}

}  // namespace

Result<TransferOps::TransferArgs> TransferOps::DecodeTransfer(Payloads p) const {
  LMC_ASSIGN_OR_RETURN(TransferArgs args, DecodeTransferTarget(p, deps_.config.key_limits));
  if (p.size() > 2) {  // commit_store's data
    LMC_ASSIGN_OR_RETURN(const std::string data, protocol::DecodeBytes(p[2], "data"));
    if (!data.empty()) {
      return Status(ErrorCode::kNotSupported,
                    "commit_store with inline data (the pickle path) is not supported: "
                    "lmcache-server moves bytes through shared memory only; write into the "
                    "slots from prepare_store and send empty data");
    }
  }
  return args;
}

void TransferOps::AddTo(OpTable* table) {
  using F = FailureValue;
  using P = Pool;
  auto transfer = [this](Payloads p) { return DecodeTransfer(p); };
  AddOp(table,
        {Op::kRegisterEngineContext, "register_kv_cache_engine_driven_context", true, P::kInline, 1,
         1, 64u << 10, F::kFailedRegistration},
        Bind(DecodeShmRegistration, [this](const RequestContext& c, const EngineContext& e) {
          return RegisterContext(c, e);
        }));
  AddOp(table,
        {Op::kUnregisterEngineContext, "unregister_kv_cache_engine_driven_context", true,
         P::kInline, 1, 1, 64, F::kNil},
        Bind(DecodeInstanceId, [this](const RequestContext& c, std::int64_t id) {
          return UnregisterContext(c, id);
        }));
  AddOp(
      table,
      {Op::kPrepareStore, "prepare_store", true, P::kAffinity, 2, 2, kKeyRequestBytes,
       F::kEmptyPrepareStore},
      BindReserving(deps_.parking, "prepare_store", transfer,
                    [this](const RequestContext& c, const TransferArgs& a,
                           store::WhilePoolWarms warming) { return PrepareStore(c, a, warming); }));
  AddOp(table,
        {Op::kCommitStore, "commit_store", true, P::kAffinity, 2, 3, kKeyRequestBytes, F::kFalse},
        Bind(transfer,
             [this](const RequestContext& c, const TransferArgs& a) { return CommitStore(c, a); }));
  AddOp(table,
        {Op::kAbortStore, "abort_store", false, P::kAffinity, 2, 2, kKeyRequestBytes, F::kFalse},
        Bind(transfer,
             [this](const RequestContext& c, const TransferArgs& a) { return AbortStore(c, a); }));
  AddOp(table,
        {Op::kPrepareRetrieve, "prepare_retrieve", true, P::kAffinity, 2, 2, kKeyRequestBytes,
         F::kFailedPrepareRetrieve},
        Bind(transfer, [this](const RequestContext& c, const TransferArgs& a) {
          return PrepareRetrieve(c, a);
        }));
  AddOp(table,
        {Op::kCommitRetrieve, "commit_retrieve", true, P::kAffinity, 2, 2, kKeyRequestBytes,
         F::kFalse},
        Bind(transfer, [this](const RequestContext& c, const TransferArgs& a) {
          return CommitRetrieve(c, a);
        }));
}

Result<std::string> TransferOps::RegisterContext(const RequestContext& context,
                                                 const EngineContext& engine) {
  LMC_ASSIGN_OR_RETURN(
      const worker::ChunkLayout layout,
      deps_.instance_rules.CheckRegistration(engine, context.connection, context.endpoint_model));
  LMC_ASSIGN_OR_RETURN(const worker::RegisterOutcome outcome,
                       deps_.instances.Register(engine, layout, context.connection));
  if (outcome.replaced) {
    deps_.instance_rules.ReleaseInstance(*outcome.replaced, worker::ReleaseCause::kReplaced);
  }
  if (outcome.is_new) {
    spdlog::info("registered instance {}: {} world size {}, chunk {} ({} bytes)",
                 engine.instance_id, engine.model_name, engine.world_size, layout.Describe(),
                 layout.object_bytes);
  }
  Registration reply;
  reply.shm_name = deps_.pool.name();
  reply.pool_size = deps_.pool.size();
  reply.boot_id = deps_.boot_id;
  reply.object_bytes = layout.object_bytes;
  return protocol::EncodeRegistration(reply);
}

Result<std::string> TransferOps::UnregisterContext(const RequestContext& context,
                                                   std::int64_t instance_id) {
  LMC_RETURN_IF_ERROR(deps_.instance_rules.Unregister(instance_id, context.connection));
  return msgpk::Encoder().Nil().Take();
}

Attempted TransferOps::PrepareStore(const RequestContext& context, const TransferArgs& args,
                                    store::WhilePoolWarms warming) {
  LMC_ASSIGN_OR_RETURN(const worker::InstanceInfo instance,
                       deps_.instance_rules.Authorize(args.instance_id, context.connection));
  LMC_ASSIGN_OR_RETURN(worker::WorkerKeys worker, deps_.instance_rules.ResolveWorkerKeys(
                                                      args.key, instance, worker::KeyUse::kStore));
  const worker::ChunkLayout& layout = instance.layout;
  store::ObjectTable& table = deps_.table;
  const std::size_t chunks = worker.keys.size();
  // The lease takes the keys over (worker.keys is not read again).
  LMC_ASSIGN_OR_RETURN(
      const store::WriteLease staged,
      table.ReserveWrite(std::move(worker.keys), layout.object_bytes, instance.owner(),
                         store::AllocationMode::kLongestPrefix, warming));
  if (staged.pages_pending) return Attempted::PagesPending(staged.ready_bytes_seen);
  // Recorded even when nothing was staged, so a commit after an all-cached
  // prepare answers True. If this registration went away meanwhile, the
  // prepare fails and gives back what it reserved.
  auto recorded =
      deps_.instances.AddPendingWrite(instance, worker.transfer, {staged.lease, staged.reserved});
  if (!recorded.ok()) {
    table.AbortWrite(staged.lease);
    return Status(recorded.status());
  }
  if (*recorded && (*recorded)->lease != staged.lease) table.AbortWrite((*recorded)->lease);

  std::vector<std::uint64_t> offsets;
  std::vector<std::uint64_t> chunk_indices;
  offsets.reserve(staged.reserved);
  chunk_indices.reserve(staged.reserved);
  for (std::size_t i = 0; i < chunks; ++i) {
    if (staged.outcomes[i] != store::WriteReservation::kReserved) continue;
    offsets.push_back(staged.offsets[i]);
    chunk_indices.push_back(i);
  }
  if (staged.out_of_memory > 0) {
    static RateLimitedLog oom_log(std::chrono::seconds(10));
    oom_log.Warn("prepare_store by instance {}: {} of {} chunks found no memory", args.instance_id,
                 staged.out_of_memory, chunks);
  }
  return Result<std::string>(protocol::EncodePrepareStoreReply(
      Slot(layout, 0), offsets, chunk_indices, staged.out_of_memory));
}

Result<std::optional<worker::PendingWrite>> TransferOps::TakePendingWrite(const RequestContext& context,
                                                                  const TransferArgs& args) {
  LMC_ASSIGN_OR_RETURN(const worker::InstanceInfo instance,
                       deps_.instance_rules.Authorize(args.instance_id, context.connection));
  LMC_ASSIGN_OR_RETURN(const worker::WorkerKeys worker,
                       deps_.instance_rules.ResolveWorkerKeys(args.key, instance, worker::KeyUse::kRead));
  return deps_.instances.TakePendingWrite(instance, worker.transfer);
}

Result<std::string> TransferOps::CommitStore(const RequestContext& context,
                                             const TransferArgs& args) {
  LMC_ASSIGN_OR_RETURN(const std::optional<worker::PendingWrite> pending, TakePendingWrite(context, args));
  if (!pending) {
    return Status(ErrorCode::kNotFound, "no prepare_store is pending for this key and instance " +
                                            std::to_string(args.instance_id));
  }
  const store::WriteCompletion done = deps_.table.FinishWrite(pending->lease);
  // Admitted or beaten to it by another writer: stored either way.
  const std::size_t stored = done.keys.size() - done.lost;
  if (stored < pending->objects) {
    return Status(ErrorCode::kLeaseExpired,
                  std::to_string(pending->objects - stored) + " of " +
                      std::to_string(pending->objects) +
                      " chunks were not stored: their write lease expired or they were deleted "
                      "before commit");
  }
  return msgpk::Encoder().Bool(true).Take();
}

Result<std::string> TransferOps::AbortStore(const RequestContext& context,
                                            const TransferArgs& args) {
  // Nothing pending is not an error: the reference answers True as well (its
  // prepare_store aborts whatever the same key left pending this way).
  LMC_ASSIGN_OR_RETURN(const std::optional<worker::PendingWrite> pending, TakePendingWrite(context, args));
  if (pending) deps_.table.AbortWrite(pending->lease);  // its slots are freed, never served
  return msgpk::Encoder().Bool(true).Take();
}

Result<std::string> TransferOps::PrepareRetrieve(const RequestContext& context,
                                                 const TransferArgs& args) {
  LMC_ASSIGN_OR_RETURN(const worker::InstanceInfo instance,
                       deps_.instance_rules.Authorize(args.instance_id, context.connection));
  LMC_ASSIGN_OR_RETURN(const worker::WorkerKeys worker,
                       deps_.instance_rules.ResolveWorkerKeys(args.key, instance, worker::KeyUse::kRead));
  LMC_ASSIGN_OR_RETURN(const store::ReadAcquisition acquired,
                       deps_.leases.AcquireForRetrieve(args.key, worker.keys, instance.owner()));
  store::ObjectTable& table = deps_.table;
  if (acquired.lease != store::kNoLease) {
    // If this registration went away meanwhile, the prepare fails and releases its lease.
    const Status recorded =
        deps_.instances.AddPendingRead(instance, worker.transfer, acquired.lease);
    if (!recorded.ok()) {
      table.ReleaseRead(acquired.lease);
      return recorded;
    }
  }
  PrepareRetrieveReply reply;
  reply.success = true;
  for (const store::ReadGrant& grant : acquired.grants) {
    reply.slots.push_back({grant.offset, grant.size, instance.layout.shape, instance.layout.dtype});
  }
  return protocol::EncodePrepareRetrieveReply(reply);
}

Result<std::string> TransferOps::CommitRetrieve(const RequestContext& context,
                                                const TransferArgs& args) {
  LMC_ASSIGN_OR_RETURN(const worker::InstanceInfo instance,
                       deps_.instance_rules.Authorize(args.instance_id, context.connection));
  LMC_ASSIGN_OR_RETURN(const worker::WorkerKeys worker,
                       deps_.instance_rules.ResolveWorkerKeys(args.key, instance, worker::KeyUse::kRead));
  // Nothing pending is not an error (the reference answers True as well).
  if (auto lease = deps_.instances.TakePendingRead(instance, worker.transfer)) {
    deps_.table.ReleaseRead(*lease);
  }
  return msgpk::Encoder().Bool(true).Take();
}

}  // namespace lmcache::server
