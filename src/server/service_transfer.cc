// Service: engine-driven registration and the shared-memory transfer path
// (spec 11): prepare_store / commit_store, prepare_retrieve / commit_retrieve.
#include <spdlog/spdlog.h>

#include "common/blake3.h"
#include "server/codec.h"
#include "server/service.h"
#include "server/service_internal.h"

namespace lmcache::server {
namespace {

// {offset, length, shape, dtype} for one slot (spec 11.3).
void EncodeSlot(Encoder& e, const store::ReadGrant& slot, const ChunkLayout& layout) {
  e.Map(4);
  e.Str("offset").Uint(slot.offset);
  e.Str("length").Uint(slot.size);
  e.Str("shape").Array(static_cast<std::uint32_t>(layout.shape.size()));
  for (const std::int64_t dim : layout.shape) e.Int(dim);
  e.Str("dtype").Str(layout.dtype);
}

}  // namespace

Status Service::CheckKeyRange(const IpcKey& key) const {
  const std::int64_t chunk = config_.chunk_size;
  const auto tokens = static_cast<std::int64_t>(key.token_ids.size());
  if (tokens > static_cast<std::int64_t>(config_.max_prompt_tokens)) {
    return Status(ErrorCode::kTooLarge, "key has " + std::to_string(tokens) +
                                            " tokens; the limit is " +
                                            std::to_string(config_.max_prompt_tokens));
  }
  if (key.start < 0 || key.end < key.start || key.end > tokens || key.start % chunk != 0 ||
      key.end % chunk != 0) {
    return InvalidArgument("key range [" + std::to_string(key.start) + ", " +
                           std::to_string(key.end) + ") must be chunk-aligned (chunk size " +
                           std::to_string(chunk) + ") and within the " + std::to_string(tokens) +
                           " tokens of the key");
  }
  LMC_RETURN_IF_ERROR(store::ValidateModelName(key.model_name));
  return store::ValidateCacheSalt(key.cache_salt);
}

Result<Service::WorkerKeys> Service::ResolveWorkerKeys(const IpcKey& key,
                                                       const InstanceInfo& instance) {
  LMC_RETURN_IF_ERROR(CheckKeyRange(key));
  if (!key.worker_id) {
    return InvalidArgument("key.worker_id is required for transfers (nil is for lookups)");
  }
  if (key.model_name != instance.model_name || key.world_size != instance.world_size) {
    return Status(ErrorCode::kLayoutMismatch,
                  "key names " + key.model_name + " with world size " +
                      std::to_string(key.world_size) + ", but instance " +
                      std::to_string(instance.instance_id) + " registered " + instance.model_name +
                      " with world size " + std::to_string(instance.world_size));
  }
  LMC_ASSIGN_OR_RETURN(const std::int64_t kv_rank,
                       store::PackKvRank(key.world_size, *key.worker_id));
  const auto first = static_cast<std::size_t>(key.start / config_.chunk_size);
  const auto last = static_cast<std::size_t>(key.end / config_.chunk_size);
  std::shared_ptr<Session> session = sessions_.GetOrCreate(key.request_id);
  if (!session) return Status(ErrorCode::kResourceExhausted, "too many live sessions");
  std::vector<store::ChunkHash> hashes;
  {
    MutexLock lock(&session->mu);
    hashes =
        session->Hashes(key.token_ids, static_cast<std::size_t>(config_.chunk_size), first, last);
  }
  WorkerKeys out;
  out.instance = instance;
  out.keys = ExpandKeys(hashes, key.model_name, key.cache_salt, {kv_rank});
  out.transfer = key.model_name + "|" + std::to_string(kv_rank) + "|" + key.cache_salt + "|" +
                 std::to_string(key.start) + "|" + std::to_string(key.end) + "|" +
                 (hashes.empty() ? std::string() : ToHex(hashes.back()));
  return out;
}

Result<std::string> Service::RegisterEngineContext(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const RegisterContextPayload payload, DecodeRegisterContext(p[0]));
  LMC_RETURN_IF_ERROR(store::ValidateModelName(payload.model_name));
  if (payload.world_size < 1 || payload.world_size > 255) {
    return InvalidArgument("world_size must be in [1, 255], got " +
                           std::to_string(payload.world_size));
  }
  LMC_ASSIGN_OR_RETURN(const ChunkLayout layout, MakeChunkLayout(payload, config_.chunk_size));
  const std::uint64_t capacity = l1_->allocator().capacity_bytes();
  if (layout.object_bytes > capacity) {
    return Status(ErrorCode::kTooLarge, "one chunk of layout " + layout.Describe() + " takes " +
                                            std::to_string(layout.object_bytes) +
                                            " bytes, more than the whole L1 pool (" +
                                            std::to_string(capacity) + " bytes)");
  }
  LMC_ASSIGN_OR_RETURN(const bool is_new, instances_.Register(payload, layout));
  if (is_new) {
    spdlog::info("registered instance {}: {} world size {}, chunk {} ({} bytes)",
                 payload.instance_id, payload.model_name, payload.world_size, layout.Describe(),
                 layout.object_bytes);
  }
  Encoder e;
  e.Map(5);
  e.Str("shm_name").Str(l1_->segment().name());
  e.Str("pool_size").Uint(l1_->segment().size());
  e.Str("boot_id").Str(boot_id_);  // ours: changes at every start, so clients see restarts
  e.Str("object_bytes").Uint(layout.object_bytes);  // ours: the slot length of this layout
  e.Str("error").Nil();
  return e.Take();
}

void Service::ReleaseInstance(const RemovedInstance& removed, const char* why) {
  const store::OwnerId owner = InstanceOwner(removed.info.instance_id);
  std::size_t aborted = 0;
  std::size_t released = 0;
  // Half-written objects are never published: the staged copies are dropped.
  for (const auto& [transfer, keys] : removed.pending_writes) {
    aborted += table().AbortWrite(keys, owner);
  }
  // Each pending read holds one lock per key (the lookup's, or its own).
  for (const auto& [transfer, keys] : removed.pending_reads) {
    if (auto outcomes = table().FinishRead(keys, 1, owner); outcomes.ok()) released += keys.size();
  }
  const store::OwnerReleaseReport rest = table().ReleaseOwner(owner);
  spdlog::info("instance {} {}: {} staged writes aborted, {} read locks released",
               removed.info.instance_id, why, aborted + rest.writes_aborted,
               released + rest.read_locks_released);
}

Result<std::string> Service::UnregisterEngineContext(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const std::int64_t instance_id, DecodeInt(p[0], "instance_id"));
  if (auto removed = instances_.Unregister(instance_id)) {
    ReleaseInstance(*removed, "unregistered");
  } else {
    spdlog::warn("unregister of unknown instance {}", instance_id);
  }
  return Encoder().Nil().Take();
}

Result<std::string> Service::PrepareStore(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const IpcKey key, DecodeIpcKey(p[0]));
  LMC_ASSIGN_OR_RETURN(const std::int64_t instance_id, DecodeInt(p[1], "instance_id"));
  LMC_ASSIGN_OR_RETURN(const InstanceInfo instance, instances_.Touch(instance_id));
  LMC_ASSIGN_OR_RETURN(const WorkerKeys worker, ResolveWorkerKeys(key, instance));
  const ChunkLayout& layout = instance.layout;
  LMC_ASSIGN_OR_RETURN(
      const store::ReserveWriteResult reserved,
      table().ReserveWrite(worker.keys, layout.object_bytes, InstanceOwner(instance_id),
                           store::AllocationMode::kLongestPrefix));
  std::vector<store::ObjectKey> staged;
  Encoder e;
  e.Map(2);
  e.Str("context").Map(2);
  e.Str("slots").Array(static_cast<std::uint32_t>(reserved.reserved));
  for (std::size_t i = 0; i < worker.keys.size(); ++i) {
    if (reserved.outcomes[i] != store::WriteReservation::kReserved) continue;
    EncodeSlot(e, {true, reserved.offsets[i], layout.object_bytes}, layout);
    staged.push_back(worker.keys[i]);
  }
  e.Str("chunk_indices").Array(static_cast<std::uint32_t>(reserved.reserved));
  for (std::size_t i = 0; i < worker.keys.size(); ++i) {
    if (reserved.outcomes[i] == store::WriteReservation::kReserved) e.Uint(i);
  }
  // Ours: how many chunks found no memory (the reference cannot tell OOM from
  // "already cached"; its clients ignore the unknown key).
  e.Str("oom_chunks").Uint(reserved.out_of_memory);
  if (reserved.out_of_memory > 0) {
    spdlog::warn("prepare_store by instance {}: {} of {} chunks found no memory", instance_id,
                 reserved.out_of_memory, worker.keys.size());
  }
  // Recorded even when empty, so a commit after an all-cached prepare answers True.
  instances_.AddPendingWrite(instance_id, worker.transfer, std::move(staged));
  return e.Take();
}

Result<std::string> Service::CommitStore(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const IpcKey key, DecodeIpcKey(p[0]));
  LMC_ASSIGN_OR_RETURN(const std::int64_t instance_id, DecodeInt(p[1], "instance_id"));
  if (p.size() > 2) {
    LMC_ASSIGN_OR_RETURN(const std::string data, DecodeBytes(p[2], "data"));
    if (!data.empty()) {
      return Status(ErrorCode::kNotSupported,
                    "commit_store with inline data (the pickle path) is not supported: "
                    "lmcache-server moves bytes through shared memory only; write into the "
                    "slots from prepare_store and send empty data");
    }
  }
  LMC_ASSIGN_OR_RETURN(const InstanceInfo instance, instances_.Touch(instance_id));
  LMC_ASSIGN_OR_RETURN(const WorkerKeys worker, ResolveWorkerKeys(key, instance));
  auto pending = instances_.TakePendingWrite(instance_id, worker.transfer);
  if (!pending) {
    return Status(ErrorCode::kNotFound, "no prepare_store is pending for this key and instance " +
                                            std::to_string(instance_id));
  }
  std::size_t lost = 0;
  for (const store::WriteOutcome outcome :
       table().FinishWrite(*pending, InstanceOwner(instance_id))) {
    if (outcome == store::WriteOutcome::kNotStaged ||
        outcome == store::WriteOutcome::kLeaseExpired) {
      lost += 1;
    }
  }
  if (lost > 0) {
    return Status(ErrorCode::kLeaseExpired,
                  std::to_string(lost) + " of " + std::to_string(pending->size()) +
                      " chunks were not stored: their write lease expired or they were deleted "
                      "before commit");
  }
  return Encoder().Bool(true).Take();
}

Result<std::string> Service::PrepareRetrieve(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const IpcKey key, DecodeIpcKey(p[0]));
  LMC_ASSIGN_OR_RETURN(const std::int64_t instance_id, DecodeInt(p[1], "instance_id"));
  LMC_ASSIGN_OR_RETURN(const InstanceInfo instance, instances_.Touch(instance_id));
  LMC_ASSIGN_OR_RETURN(const WorkerKeys worker, ResolveWorkerKeys(key, instance));
  const store::OwnerId owner = InstanceOwner(instance_id);
  LMC_ASSIGN_OR_RETURN(const std::vector<store::ReadGrant> grants,
                       table().AcquireForRead(worker.keys, owner));
  if (!worker.keys.empty() && !grants.front().granted) {
    // All or nothing: the lookup's lock on each chunk that is still here is
    // consumed, as a completed retrieve would have done.
    std::vector<store::ObjectKey> found;
    for (const store::ObjectKey& object : worker.keys) {
      if (auto info = table().Find(object); info && info->state == store::ObjectState::kResident) {
        found.push_back(object);
      }
    }
    if (!found.empty()) (void)table().FinishRead(found, 1, owner);
    return Status(ErrorCode::kNotFound,
                  std::to_string(worker.keys.size() - found.size()) + " of " +
                      std::to_string(worker.keys.size()) +
                      " chunks are not in L1 (evicted, never stored, or not looked up)");
  }
  Encoder e;
  e.Map(3);
  e.Str("success").Bool(true);
  e.Str("data").Bin("");
  e.Str("context").Map(1).Str("slots").Array(static_cast<std::uint32_t>(grants.size()));
  for (const store::ReadGrant& grant : grants) EncodeSlot(e, grant, instance.layout);
  if (!worker.keys.empty()) instances_.AddPendingRead(instance_id, worker.transfer, worker.keys);
  return e.Take();
}

Result<std::string> Service::CommitRetrieve(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const IpcKey key, DecodeIpcKey(p[0]));
  LMC_ASSIGN_OR_RETURN(const std::int64_t instance_id, DecodeInt(p[1], "instance_id"));
  LMC_ASSIGN_OR_RETURN(const InstanceInfo instance, instances_.Touch(instance_id));
  LMC_ASSIGN_OR_RETURN(const WorkerKeys worker, ResolveWorkerKeys(key, instance));
  // Nothing pending is not an error (the reference answers True as well).
  if (auto pending = instances_.TakePendingRead(instance_id, worker.transfer)) {
    LMC_RETURN_IF_ERROR(table().FinishRead(*pending, 1, InstanceOwner(instance_id)).status());
  }
  return Encoder().Bool(true).Take();
}

}  // namespace lmcache::server
