#include "worker/instance_rules.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "common/blake3.h"
#include "common/logging.h"

namespace lmcache::worker {

InstanceRules::InstanceRules(InstanceRegistry* instances, store::L1Cache* l1, ChunkHasher* hasher,
                             const store::ChunkSizes* chunk_sizes, events::TokenBindings* bindings)
    : instances_(instances),
      l1_(l1),
      hasher_(hasher),
      chunk_sizes_(chunk_sizes),
      bindings_(bindings) {}

Result<InstanceInfo> InstanceRules::Authorize(std::int64_t instance_id,
                                             std::string_view connection) {
  return instances_->Authorize(instance_id, connection);
}

std::array<std::uint64_t, kReleaseCauses> InstanceRules::ReleasedCounts() const {
  std::array<std::uint64_t, kReleaseCauses> counts{};
  for (std::size_t i = 0; i < kReleaseCauses; ++i) {
    counts[i] = released_[i].load(std::memory_order_relaxed);
  }
  return counts;
}

Result<WorkerKeys> InstanceRules::ResolveWorkerKeys(const IpcKey& key,
                                                   const InstanceInfo& instance, KeyUse use) {
  const std::int64_t chunk_size = instance.layout.chunk_size;
  LMC_RETURN_IF_ERROR(CheckKeyRange(key, chunk_size));
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
  const auto chunk = static_cast<std::size_t>(chunk_size);
  const auto first = static_cast<std::size_t>(key.start) / chunk;
  const auto last = static_cast<std::size_t>(key.end) / chunk;
  const std::vector<store::ChunkHash> hashes = hasher_->Hashes(key.token_ids, chunk, last);
  const std::span<const store::ChunkHash> range = std::span(hashes).subspan(first);
  if (use == KeyUse::kStore && bindings_ != nullptr) {
    // Before the commit admits them: the admission's KV event takes the tokens.
    bindings_->Bind(key.model_name, hashes, first, key.token_ids, chunk);
  }
  WorkerKeys out;
  out.instance = instance;
  out.keys = ExpandKeys(range, key.model_name, key.cache_salt, store::CanonicalTags(key.tags),
                        std::span(&kv_rank, 1), instance.layout.object_namespace);
  out.transfer = key.model_name + "|" + std::to_string(kv_rank) + "|" + TenantOf(key) + "|" +
                 std::to_string(key.start) + "|" + std::to_string(key.end) + "|" +
                 (hashes.empty() ? std::string() : ToHex(hashes.back()));
  return out;
}

Result<ChunkLayout> InstanceRules::CheckRegistration(const EngineContext& engine,
                                                     std::string_view connection,
                                                     std::string_view endpoint_model) {
  LMC_RETURN_IF_ERROR(CheckRegistrant(engine, connection, endpoint_model));
  LMC_ASSIGN_OR_RETURN(const ChunkLayout layout,
                       MakeChunkLayout(engine, chunk_sizes_->For(engine.model_name)));
  LMC_RETURN_IF_ERROR(CheckFits(layout));
  return layout;
}

Status InstanceRules::CheckRegistrant(const EngineContext& engine, std::string_view connection,
                                      std::string_view endpoint_model) {
  LMC_RETURN_IF_ERROR(store::ValidateModelName(engine.model_name));
  LMC_RETURN_IF_ERROR(chunk_sizes_->CheckServedAt(endpoint_model, engine.model_name));
  if (engine.world_size < 1 || engine.world_size > 255) {
    return InvalidArgument("world_size must be in [1, 255], got " +
                           std::to_string(engine.world_size));
  }
  if (draining() && !instances_->Authorize(engine.instance_id, connection).ok()) {
    return Status(ErrorCode::kUnavailable,
                  "the server is draining before it exits (SIGTERM): register with the server "
                  "that replaces it");
  }
  return Status::Ok();
}

Status InstanceRules::CheckFits(const ChunkLayout& layout) {
  const std::uint64_t capacity = l1_->allocator().capacity_bytes();
  if (layout.object_bytes > capacity) {
    return Status(ErrorCode::kTooLarge, "one chunk of layout " + layout.Describe() + " takes " +
                                            std::to_string(layout.object_bytes) +
                                            " bytes, more than the whole L1 pool (" +
                                            std::to_string(capacity) + " bytes)");
  }
  return Status::Ok();
}

Status InstanceRules::Unregister(std::int64_t instance_id, std::string_view connection) {
  static RateLimitedLog unknown_log(std::chrono::seconds(10));
  Result<RemovedInstance> removed = instances_->Unregister(instance_id, connection);
  if (removed.ok()) {
    ReleaseInstance(*removed, ReleaseCause::kUnregistered);
  } else if (removed.status().code() == ErrorCode::kNotRegistered) {
    unknown_log.Warn("unregister of unknown instance {}", instance_id);  // the reference: warning only
  } else {
    return removed.status();
  }
  return Status::Ok();
}

void InstanceRules::ReleaseInstance(const RemovedInstance& removed, ReleaseCause cause) {
  released_[static_cast<std::size_t>(cause)].fetch_add(1, std::memory_order_relaxed);
  // Device copies keep their own leases (Owner::Device) until they end; a
  // GPU registration's context closes once they have.
  for (const auto& listener : listeners_) listener(removed.info.registration);
  store::ObjectTable& objects = l1_->table();
  std::size_t aborted = 0;
  std::size_t released = 0;
  // Half-written objects are never published: the staged copies are dropped.
  for (const store::LeaseId lease : removed.writes) aborted += objects.AbortWrite(lease);
  for (const store::LeaseId lease : removed.reads) released += objects.ReleaseRead(lease);
  // Anything the registration still holds (a prepare that lost the race with
  // this removal releases its own lease as well).
  const store::OwnerReleaseReport rest = objects.ReleaseOwner(removed.info.owner());
  spdlog::info("instance {} released ({}): {} staged writes aborted, {} read locks released",
               removed.info.instance_id, ReleaseCauseName(cause), aborted + rest.writes_aborted,
               released + rest.read_locks_released);
}

}  // namespace lmcache::worker
