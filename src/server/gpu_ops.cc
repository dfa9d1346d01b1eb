#include "server/gpu_ops.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "gpu/kv_layout.h"
#include "gpu/torch_ipc_refcount.h"
#include "gpu/transfer_plan.h"

namespace lmcache::server {
namespace {

// A store/retrieve frame carries a key of up to 4 Mi tokens plus its block ids.
constexpr std::size_t kTransferRequestBytes = 48u << 20;
constexpr std::size_t kRegisterRequestBytes = 4u << 20;

Result<protocol::KvCacheRegistration> DecodeGpuRegistration(Payloads p) {
  return protocol::DecodeKvCacheRegistration(p);
}

// The CUDA-IPC path reads vLLM's KV formats (gpu/kv_format.h) and nothing else.
Status CheckEngineType(const std::string& engine_type) {
  const bool digits =
      !engine_type.empty() && std::all_of(engine_type.begin(), engine_type.end(),
                                          [](char c) { return c >= '0' && c <= '9'; });
  if (engine_type.empty() || engine_type == "vllm" || engine_type == "mock" || digits)
    return Status::Ok();
  return Status(ErrorCode::kNotSupported,
                "register_kv_cache from engine_type '" + engine_type +
                    "': this server's CUDA-IPC path reads vLLM's KV cache formats only; use "
                    "the shared-memory path (register_kv_cache_engine_driven_context)");
}

// The object layout a registration binds, as the instance registry compares it.
worker::ChunkLayout ChunkLayoutOf(const gpu::KvLayout& layout) {
  worker::ChunkLayout c;
  const gpu::KvGroupLayout& first = layout.groups.front();
  c.num_layers = first.num_layers();
  c.shape = first.ObjectShape();
  c.hidden_dim = c.shape.back();
  c.chunk_size = layout.chunk_tokens;
  c.dtype = first.dtype;
  c.use_mla = first.format == gpu::KvFormat::kMla;
  for (const gpu::KvGroupLayout& g : layout.groups) c.parts.push_back({g.ObjectShape(), g.dtype});
  c.object_bytes = layout.object_bytes;
  c.object_namespace = layout.object_namespace;
  return c;
}

}  // namespace

Result<GpuOps::TransferArgs> GpuOps::DecodeTransfer(Payloads p) const {
  TransferArgs args;
  LMC_ASSIGN_OR_RETURN(args.target, DecodeTransferTarget(p, deps_.config.key_limits));
  LMC_ASSIGN_OR_RETURN(args.block_ids, protocol::DecodeBlockIds(p[2]));
  LMC_ASSIGN_OR_RETURN(args.engine_event, protocol::DecodeEventHandle(p[3]));
  if (p.size() > 4) {
    LMC_ASSIGN_OR_RETURN(args.skip_tokens, protocol::DecodeInt(p[4], "skip_first_n_tokens"));
    if (args.skip_tokens < 0) return InvalidArgument("skip_first_n_tokens must be >= 0");
  }
  return args;
}

void GpuOps::AddTo(OpTable* table) {
  using F = FailureValue;
  using P = Pool;
  auto transfer = [this](Payloads p) { return DecodeTransfer(p); };
  // Affinity pool: opening a worker's IPC memory takes milliseconds, off the loop.
  AddOp(table,
        {Op::kRegisterKvCache, "register_kv_cache", true, P::kAffinity, 5, 16,
         kRegisterRequestBytes, F::kNil},
        Bind(DecodeGpuRegistration,
             [this](const RequestContext& c, const protocol::KvCacheRegistration& r) {
               return Register(c, r);
             }));
  AddOp(table, {Op::kUnregisterKvCache, "unregister_kv_cache", true, P::kInline, 1, 1, 64, F::kNil},
        Bind(DecodeInstanceId,
             [this](const RequestContext& c, std::int64_t id) { return Unregister(c, id); }));
  AddOp(table,
        {Op::kStore, "store", true, P::kAffinity, 4, 4, kTransferRequestBytes, F::kEventFailure},
        BindReserving(deps_.parking, "store", transfer,
                      [this](const RequestContext& c, const TransferArgs& a,
                             store::WhilePoolWarms warming) { return Store(c, a, warming); }));
  AddOp(table,
        {Op::kRetrieve, "retrieve", true, P::kAffinity, 5, 5, kTransferRequestBytes,
         F::kEventFailure},
        Bind(transfer,
             [this](const RequestContext& c, const TransferArgs& a) { return Retrieve(c, a); }));
}

Result<gpu::GpuContexts*> GpuOps::Contexts() {
  MutexLock lock(&mu_);
  if (!contexts_) {
    contexts_ = std::make_unique<gpu::GpuContexts>(
        deps_.config.gpu_backend, std::chrono::milliseconds(deps_.config.gpu_event_timeout_ms));
  }
  LMC_RETURN_IF_ERROR(contexts_->backend().status());
  return contexts_.get();
}

gpu::GpuContexts* GpuOps::ContextsIfMade() const {
  MutexLock lock(&mu_);
  return contexts_.get();  // never reset once made: the pointer stays valid
}

void GpuOps::OnRegistrationGone(std::uint64_t registration) {
  if (gpu::GpuContexts* contexts = ContextsIfMade()) contexts->Retire(registration);
}

void GpuOps::AddStats(StatsSnapshot* stats) const {
  if (const gpu::GpuContexts* contexts = ContextsIfMade()) stats->gpu = contexts->Stats();
}

std::optional<std::string> GpuOps::Problem() const {
  const gpu::GpuContexts* contexts = ContextsIfMade();
  return contexts ? contexts->Problem() : std::nullopt;
}

Result<std::string> GpuOps::Register(const RequestContext& context,
                                     const protocol::KvCacheRegistration& r) {
  bool context_owns_tensors = false;
  Result<std::string> reply = RegisterChecked(context, r, &context_owns_tensors);
  // A registration that keeps no view of the worker's storages gives back
  // their IPC references at once, as a receiver that freed them would.
  if (!context_owns_tensors) gpu::ReleaseTorchRefCounters(r.layers);
  return reply;
}

Result<std::string> GpuOps::RegisterChecked(const RequestContext& context,
                                            const protocol::KvCacheRegistration& r,
                                            bool* context_owns_tensors) {
  LMC_ASSIGN_OR_RETURN(gpu::GpuContexts * contexts, Contexts());
  LMC_ASSIGN_OR_RETURN(gpu::KvBackend * backend, contexts->backend());
  LMC_RETURN_IF_ERROR(CheckEngineType(r.engine_type));
  LMC_RETURN_IF_ERROR(backend->CheckAvailable());
  EngineContext identity;
  identity.instance_id = r.instance_id;
  identity.model_name = r.model_name;
  identity.world_size = r.world_size;
  // First: on the wrong endpoint that is the error, not the layout's.
  LMC_RETURN_IF_ERROR(
      deps_.instance_rules.CheckRegistrant(identity, context.connection, context.endpoint_model));
  const std::int64_t chunk = deps_.config.chunk_sizes.For(r.model_name);
  LMC_ASSIGN_OR_RETURN(const gpu::KvLayout layout, gpu::DetectKvLayout(r, chunk));
  const worker::ChunkLayout chunk_layout = ChunkLayoutOf(layout);
  LMC_RETURN_IF_ERROR(deps_.instance_rules.CheckFits(chunk_layout));
  // The same connection registering again (after a hiccup): as the reference, only its liveness.
  if (auto same = deps_.instances.Authorize(r.instance_id, context.connection);
      same.ok() && contexts->Find(same->registration)) {
    return msgpk::Encoder().Nil().Take();
  }
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<gpu::KvContext> device,
                       backend->Open(layout, gpu::PoolView{deps_.pool.bytes()}));
  *context_owns_tensors = true;  // the context gives the references back when it closes
  LMC_ASSIGN_OR_RETURN(const worker::RegisterOutcome outcome,
                       deps_.instances.Register(identity, chunk_layout, context.connection));
  if (outcome.replaced) {
    deps_.instance_rules.ReleaseInstance(*outcome.replaced, worker::ReleaseCause::kReplaced);
  }
  contexts->Add(outcome.info.registration,
                std::make_shared<gpu::GpuContexts::Entry>(layout, std::move(device)));
  spdlog::info(
      "registered the GPU KV cache of instance {}: {} world size {} on {} ({} backend): {}; "
      "{} bytes per chunk",
      r.instance_id, r.model_name, r.world_size, layout.device_uuid, backend->name(),
      layout.Describe(), chunk_layout.object_bytes);
  return msgpk::Encoder().Nil().Take();
}

Result<std::string> GpuOps::Unregister(const RequestContext& context, std::int64_t instance_id) {
  LMC_RETURN_IF_ERROR(deps_.instance_rules.Unregister(instance_id, context.connection));
  return msgpk::Encoder().Nil().Take();
}

Status GpuOps::Begin(const RequestContext& context, const TransferArgs& args, worker::KeyUse use,
                     Transfer* t) {
  const std::int64_t instance_id = args.target.instance_id;
  LMC_ASSIGN_OR_RETURN(const worker::InstanceInfo instance,
                       deps_.instance_rules.Authorize(instance_id, context.connection));
  if (gpu::GpuContexts* contexts = ContextsIfMade()) t->entry = contexts->Find(instance.registration);
  if (!t->entry) {
    return Status(ErrorCode::kNotRegistered,
                  "instance " + std::to_string(instance_id) +
                      " registered no GPU KV cache (register_kv_cache): store and retrieve copy "
                      "from and to it");
  }
  LMC_ASSIGN_OR_RETURN(t->worker,
                       deps_.instance_rules.ResolveWorkerKeys(args.target.key, instance, use));
  // Fail closed: a short list or a foreign id would copy out of bounds.
  return gpu::CheckBlockIds(t->entry->layout(), t->chunks(), args.block_ids);
}

OpResult GpuOps::Failed(const std::shared_ptr<gpu::GpuContexts::Entry>& entry, const Status& status) {
  if (!entry) return status;
  Result<gpu::EventHandle> event = entry->FailedEvent();
  if (!event.ok()) return status;
  return OpResult::Failure(status, protocol::EncodeEventReply(*event, false));
}

Attempted GpuOps::Store(const RequestContext& context, const TransferArgs& args,
                        store::WhilePoolWarms warming) {
  Transfer t;
  if (const Status begun = Begin(context, args, worker::KeyUse::kStore, &t); !begun.ok())
    return Failed(t.entry, begun);
  const gpu::KvLayout& layout = t.entry->layout();
  // Only complete chunks not stored yet get memory (spec 10.2: "new"); the rest are skipped.
  const std::vector<gpu::ChunkPlan> plans = gpu::PlanStore(layout, args.block_ids, t.chunks());
  std::vector<store::ObjectKey> keys;
  for (const gpu::ChunkPlan& plan : plans) keys.push_back(t.worker.keys[plan.chunk]);
  store::ObjectTable& table = deps_.table;
  Result<store::WriteLease> staged = table.ReserveWrite(
      keys, layout.object_bytes, store::Owner::Device(t.worker.instance.registration),
      store::AllocationMode::kLongestPrefix, warming);
  if (!staged.ok()) return Failed(t.entry, staged.status());
  if (staged->pages_pending) return Attempted::PagesPending(staged->ready_bytes_seen);
  std::vector<gpu::ChunkTransfer> chunks;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (staged->outcomes[i] != store::WriteReservation::kReserved) continue;
    chunks.push_back({staged->offsets[i], plans[i].groups});
  }
  const store::LeaseId lease = staged->lease;
  // Published only once every copy landed; a failed transfer publishes nothing.
  auto done = [&table, lease](const Status& status) {
    if (lease == store::kNoLease) return;
    if (status.ok()) {
      table.FinishWrite(lease);
    } else {
      table.AbortWrite(lease);
    }
  };
  Result<gpu::EventHandle> event = t.entry->Enqueue(gpu::Direction::kStore, args.engine_event,
                                                    std::move(chunks), std::move(done));
  if (!event.ok()) return Failed(t.entry, event.status());
  return OpResult(protocol::EncodeEventReply(*event, true));
}

OpResult GpuOps::Retrieve(const RequestContext& context, const TransferArgs& args) {
  Transfer t;
  if (const Status begun = Begin(context, args, worker::KeyUse::kRead, &t); !begun.ok())
    return Failed(t.entry, begun);
  Result<store::ReadAcquisition> acquired = deps_.leases.AcquireForRetrieve(
      args.target.key, t.worker.keys, store::Owner::Device(t.worker.instance.registration));
  if (!acquired.ok()) return Failed(t.entry, acquired.status());
  const std::vector<gpu::ChunkPlan> plans =
      gpu::PlanRetrieve(t.entry->layout(), args.block_ids, t.chunks(), args.skip_tokens);
  std::vector<gpu::ChunkTransfer> chunks;
  for (std::size_t i = 0; i < acquired->grants.size(); ++i) {
    chunks.push_back({acquired->grants[i].offset, plans[i].groups});
  }
  store::ObjectTable& table = deps_.table;
  const store::LeaseId lease = acquired->lease;
  // The objects stay locked until the copies out of them are done.
  auto done = [&table, lease](const Status&) {
    if (lease != store::kNoLease) table.ReleaseRead(lease);
  };
  Result<gpu::EventHandle> event = t.entry->Enqueue(gpu::Direction::kRetrieve, args.engine_event,
                                                    std::move(chunks), std::move(done));
  if (!event.ok()) return Failed(t.entry, event.status());
  return protocol::EncodeEventReply(*event, true);
}

bool GpuOps::BoundToProcess(std::uint64_t registration) const {
  const gpu::GpuContexts* contexts = ContextsIfMade();
  return contexts != nullptr && contexts->Find(registration) != nullptr;
}

}  // namespace lmcache::server
