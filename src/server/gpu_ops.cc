#include "server/gpu_ops.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace lmcache::server {
namespace {

// A store/retrieve frame carries a key of up to 4 Mi tokens plus its block ids.
constexpr std::size_t kTransferRequestBytes = 48u << 20;

Result<protocol::KvCacheRegistration> DecodeRegister(Payloads p) {
  return protocol::DecodeKvCacheRegistration(p);
}

Result<std::int64_t> DecodeInstanceId(Payloads p) { return protocol::DecodeInt(p[0], "instance_id"); }

}  // namespace

Result<GpuOps::TransferArgs> GpuOps::DecodeTransfer(Payloads p) const {
  TransferArgs args;
  LMC_ASSIGN_OR_RETURN(args.key, protocol::DecodeIpcKey(p[0], state_->config().key_limits));
  LMC_ASSIGN_OR_RETURN(args.instance_id, protocol::DecodeInt(p[1], "instance_id"));
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
  table->Add({Op::kRegisterKvCache, "register_kv_cache", true, P::kAffinity, 7, 7, 4u << 20, F::kNil},
             Bind(DecodeRegister, [this](const RequestContext& c, const protocol::KvCacheRegistration& r) {
               return Register(c, r);
             }));
  table->Add({Op::kUnregisterKvCache, "unregister_kv_cache", true, P::kInline, 1, 1, 64, F::kNil},
             Bind(DecodeInstanceId, [this](const RequestContext& c, std::int64_t id) {
               return Unregister(c, id);
             }));
  table->Add({Op::kStore, "store", true, P::kAffinity, 4, 4, kTransferRequestBytes, F::kEventFailure},
             Bind(transfer, [this](const RequestContext& c, const TransferArgs& a) { return Store(c, a); }));
  table->Add({Op::kRetrieve, "retrieve", true, P::kAffinity, 5, 5, kTransferRequestBytes,
              F::kEventFailure},
             Bind(transfer, [this](const RequestContext& c, const TransferArgs& a) { return Retrieve(c, a); }));
}

Result<std::string> GpuOps::Register(const RequestContext& context,
                                     const protocol::KvCacheRegistration& r) {
  LMC_ASSIGN_OR_RETURN(gpu::KvBackend* backend, state_->gpu().backend());
  LMC_RETURN_IF_ERROR(backend->CheckAvailable());
  if (r.engine_groups > 1) {
    return Status(ErrorCode::kNotSupported, std::to_string(r.engine_groups) +
                                                " KV groups (a hybrid model): register_kv_cache serves "
                                                "one group of identical layers");
  }
  LMC_ASSIGN_OR_RETURN(const gpu::KvLayout layout, gpu::DetectKvLayout(r.layers, r.hints));
  const std::int64_t chunk = state_->config().chunk_size;
  LMC_RETURN_IF_ERROR(gpu::CheckChunkSize(layout, chunk));
  EngineContext engine;
  engine.instance_id = r.instance_id;
  engine.model_name = r.model_name;
  engine.world_size = r.world_size;
  engine.block_size = layout.geometry.block_size;
  engine.num_layers = layout.num_layers();
  engine.hidden_dim_size = layout.geometry.heads * layout.geometry.head_bytes / layout.element_size;
  engine.dtype_str = layout.dtype;
  engine.use_mla = layout.format == gpu::KvFormat::kMla;
  LMC_ASSIGN_OR_RETURN(const ChunkLayout chunk_layout, state_->CheckRegistration(engine, context));
  if (chunk_layout.object_bytes != layout.ObjectBytes(chunk)) {
    return Internal("object size mismatch: " + std::to_string(chunk_layout.object_bytes) + " vs " +
                    std::to_string(layout.ObjectBytes(chunk)));
  }
  // The same connection registering again (after a hiccup): as the reference, only its liveness.
  if (auto same = state_->instances().Authorize(r.instance_id, context.connection);
      same.ok() && state_->gpu().Find(same->registration)) {
    return mp::Encoder().Nil().Take();
  }
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<gpu::KvContext> device,
                       backend->Open(layout, chunk, state_->l1().segment().bytes()));
  LMC_ASSIGN_OR_RETURN(const RegisterOutcome outcome,
                       state_->instances().Register(engine, chunk_layout, context.connection));
  if (outcome.replaced) {
    state_->counters().replaced_registrations.fetch_add(1, std::memory_order_relaxed);
    state_->ReleaseInstance(*outcome.replaced, "re-registered from a new connection");
  }
  state_->gpu().Add(outcome.info.registration,
                    std::make_shared<GpuContexts::Entry>(layout, std::move(device)));
  spdlog::info("registered the GPU KV cache of instance {}: {} world size {}, {} layers {} {} on {} "
               "({} backend), {} bytes per chunk",
               r.instance_id, r.model_name, r.world_size, layout.num_layers(),
               gpu::KvFormatName(layout.format), layout.dtype, layout.device_uuid, backend->name(),
               chunk_layout.object_bytes);
  return mp::Encoder().Nil().Take();
}

Result<std::string> GpuOps::Unregister(const RequestContext& context, std::int64_t instance_id) {
  LMC_RETURN_IF_ERROR(state_->Unregister(instance_id, context));
  return mp::Encoder().Nil().Take();
}

Result<GpuOps::Transfer> GpuOps::Begin(const RequestContext& context, const TransferArgs& args) {
  LMC_ASSIGN_OR_RETURN(const InstanceInfo instance, state_->Authorize(args.instance_id, context));
  Transfer t;
  t.entry = state_->gpu().Find(instance.registration);
  if (!t.entry) {
    return Status(ErrorCode::kNotRegistered,
                  "instance " + std::to_string(args.instance_id) +
                      " registered no GPU KV cache (register_kv_cache): store and retrieve copy "
                      "from and to it");
  }
  LMC_ASSIGN_OR_RETURN(t.worker, state_->ResolveWorkerKeys(args.key, instance));
  // Fail closed: a short list or a foreign id would copy out of bounds.
  LMC_RETURN_IF_ERROR(gpu::CheckBlockIds(t.entry->layout(), args.key.end - args.key.start, args.block_ids));
  return t;
}

std::vector<gpu::ChunkTransfer> GpuOps::Chunks(const Transfer& t, const TransferArgs& args,
                                               std::span<const std::size_t> chunk_indices,
                                               std::span<const store::Offset> offsets) const {
  const std::int64_t chunk = state_->config().chunk_size;
  const std::int64_t block_size = t.entry->layout().geometry.block_size;
  const std::int64_t blocks_per_chunk = chunk / block_size;
  const std::int64_t tokens = args.key.end - args.key.start;
  const std::int64_t skip = args.skip_tokens / block_size * block_size;  // whole blocks only
  const std::uint64_t object_bytes = t.worker.instance.layout.object_bytes;
  std::vector<gpu::ChunkTransfer> chunks;
  for (std::size_t n = 0; n < chunk_indices.size(); ++n) {
    const auto i = static_cast<std::int64_t>(chunk_indices[n]);
    gpu::ChunkTransfer c;
    c.tokens = std::min(chunk, tokens - i * chunk);
    c.skip_tokens = std::clamp<std::int64_t>(skip - i * chunk, 0, c.tokens);
    const std::int64_t first = i * blocks_per_chunk;
    const std::int64_t count = (c.tokens + block_size - 1) / block_size;
    c.block_ids.assign(args.block_ids.begin() + first, args.block_ids.begin() + first + count);
    c.object = *state_->l1().allocator().Resolve(offsets[n], object_bytes);
    chunks.push_back(std::move(c));
  }
  return chunks;
}

Result<std::string> GpuOps::Store(const RequestContext& context, const TransferArgs& args) {
  LMC_ASSIGN_OR_RETURN(const Transfer t, Begin(context, args));
  store::ObjectTable& table = state_->table();
  // Only chunks not stored yet get memory (spec 10.2: "new"); the rest are skipped.
  LMC_ASSIGN_OR_RETURN(const store::WriteLease staged,
                       table.ReserveWrite(t.worker.keys, t.worker.instance.layout.object_bytes,
                                          store::Owner::Device(t.worker.instance.registration),
                                          store::AllocationMode::kLongestPrefix));
  std::vector<std::size_t> indices;
  std::vector<store::Offset> offsets;
  for (std::size_t i = 0; i < t.worker.keys.size(); ++i) {
    if (staged.outcomes[i] != store::WriteReservation::kReserved) continue;
    indices.push_back(i);
    offsets.push_back(staged.offsets[i]);
  }
  const store::LeaseId lease = staged.lease;
  // Published only once every copy landed; a failed transfer publishes nothing.
  auto done = [&table, lease](const Status& status) {
    if (lease == store::kNoLease) return;
    if (status.ok()) {
      table.FinishWrite(lease);
    } else {
      table.AbortWrite(lease);
    }
  };
  LMC_ASSIGN_OR_RETURN(const gpu::EventHandle event,
                       t.entry->Enqueue(gpu::Direction::kStore, args.engine_event,
                                        Chunks(t, args, indices, offsets), std::move(done)));
  return protocol::EncodeEventReply(event, true);
}

Result<std::string> GpuOps::Retrieve(const RequestContext& context, const TransferArgs& args) {
  LMC_ASSIGN_OR_RETURN(const Transfer t, Begin(context, args));
  LMC_ASSIGN_OR_RETURN(const store::ReadAcquisition acquired,
                       state_->AcquireForRetrieve(args.key, t.worker.keys,
                                                  store::Owner::Device(t.worker.instance.registration)));
  std::vector<std::size_t> indices;
  std::vector<store::Offset> offsets;
  for (std::size_t i = 0; i < acquired.grants.size(); ++i) {
    indices.push_back(i);
    offsets.push_back(acquired.grants[i].offset);
  }
  store::ObjectTable& table = state_->table();
  const store::LeaseId lease = acquired.lease;
  // The objects stay locked until the copies out of them are done.
  auto done = [&table, lease](const Status&) {
    if (lease != store::kNoLease) table.ReleaseRead(lease);
  };
  LMC_ASSIGN_OR_RETURN(const gpu::EventHandle event,
                       t.entry->Enqueue(gpu::Direction::kRetrieve, args.engine_event,
                                        Chunks(t, args, indices, offsets), std::move(done)));
  return protocol::EncodeEventReply(event, true);
}

}  // namespace lmcache::server
