#include "server/service_state.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "common/blake3.h"
#include "common/logging.h"

namespace lmcache::server {

std::string NewBootId() {
  std::random_device device;
  std::mt19937_64 rng(
      (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 2; ++i) {
    std::uint64_t word = rng();
    for (int j = 0; j < 16; ++j, word >>= 4) id += kHex[word & 0xf];
  }
  return id;
}

Result<TransferTarget> DecodeTransferTarget(Payloads p, const protocol::KeyLimits& limits) {
  TransferTarget target;
  LMC_ASSIGN_OR_RETURN(target.key, protocol::DecodeIpcKey(p[0], limits));
  LMC_ASSIGN_OR_RETURN(target.instance_id, protocol::DecodeInt(p[1], "instance_id"));
  return target;
}

std::vector<std::int64_t> AllRanks(std::int64_t world_size) {
  std::vector<std::int64_t> ranks;
  for (std::int64_t w = 0; w < world_size; ++w) ranks.push_back(*store::PackKvRank(world_size, w));
  return ranks;
}

std::vector<store::ObjectKey> ExpandKeys(std::span<const store::ChunkHash> hashes,
                                         const std::string& model, const std::string& salt,
                                         std::span<const std::int64_t> kv_ranks,
                                         std::uint32_t layout) {
  std::vector<store::ObjectKey> keys;
  keys.reserve(hashes.size() * kv_ranks.size());
  for (const store::ChunkHash& hash : hashes) {
    for (const std::int64_t rank : kv_ranks) keys.push_back({hash, model, rank, 0, salt, layout});
  }
  return keys;
}

ServiceState::ServiceState(store::L1Cache* l1, const Clock* clock, const ServiceConfig& config,
                           tier::Prefetcher* prefetcher)
    : l1_(l1),
      clock_(clock),
      prefetcher_(prefetcher),
      config_(config),
      boot_id_(NewBootId()),
      instances_(clock, config.max_pending_transfers),
      sessions_(clock, config.sessions, [this](Session& session) { ReleaseSession(session); }),
      parked_(ParkedRequests::Create(clock, config.parked)),
      hasher_(static_cast<std::size_t>(config.chunk_size), config.hash_cache_bytes) {}

ServiceState::~ServiceState() { parked_->Drain(); }

Status ServiceState::CheckKeyRange(const IpcKey& key) const {
  const std::int64_t chunk = config_.chunk_size;
  const auto tokens = static_cast<std::int64_t>(key.token_ids.size());
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

Result<InstanceInfo> ServiceState::Authorize(std::int64_t instance_id,
                                             const RequestContext& context) {
  return instances_.Authorize(instance_id, context.connection);
}

Result<WorkerKeys> ServiceState::ResolveWorkerKeys(const IpcKey& key,
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
  const std::vector<store::ChunkHash> hashes = hasher_.Hashes(key.token_ids, last);
  const std::span<const store::ChunkHash> range = std::span(hashes).subspan(first);
  WorkerKeys out;
  out.instance = instance;
  out.keys = ExpandKeys(range, key.model_name, key.cache_salt, std::span(&kv_rank, 1),
                        instance.layout.object_namespace);
  out.transfer = key.model_name + "|" + std::to_string(kv_rank) + "|" + key.cache_salt + "|" +
                 std::to_string(key.start) + "|" + std::to_string(key.end) + "|" +
                 (hashes.empty() ? std::string() : ToHex(hashes.back()));
  return out;
}

Result<ChunkLayout> ServiceState::CheckRegistration(const EngineContext& engine,
                                                   const RequestContext& context) {
  LMC_RETURN_IF_ERROR(CheckRegistrant(engine, context));
  LMC_ASSIGN_OR_RETURN(const ChunkLayout layout, MakeChunkLayout(engine, config().chunk_size));
  LMC_RETURN_IF_ERROR(CheckFits(layout));
  return layout;
}

Status ServiceState::CheckRegistrant(const EngineContext& engine, const RequestContext& context) {
  LMC_RETURN_IF_ERROR(store::ValidateModelName(engine.model_name));
  if (engine.world_size < 1 || engine.world_size > 255) {
    return InvalidArgument("world_size must be in [1, 255], got " +
                           std::to_string(engine.world_size));
  }
  if (draining() && !instances().Authorize(engine.instance_id, context.connection).ok()) {
    return Status(ErrorCode::kUnavailable,
                  "the server is draining before it exits (SIGTERM): register with the server "
                  "that replaces it");
  }
  return Status::Ok();
}

Status ServiceState::CheckFits(const ChunkLayout& layout) {
  const std::uint64_t capacity = l1().allocator().capacity_bytes();
  if (layout.object_bytes > capacity) {
    return Status(ErrorCode::kTooLarge, "one chunk of layout " + layout.Describe() + " takes " +
                                            std::to_string(layout.object_bytes) +
                                            " bytes, more than the whole L1 pool (" +
                                            std::to_string(capacity) + " bytes)");
  }
  return Status::Ok();
}

Status ServiceState::Unregister(std::int64_t instance_id, const RequestContext& context) {
  static RateLimitedLog unknown_log(std::chrono::seconds(10));
  Result<RemovedInstance> removed = instances_.Unregister(instance_id, context.connection);
  if (removed.ok()) {
    ReleaseInstance(*removed, ReleaseCause::kUnregistered);
  } else if (removed.status().code() == ErrorCode::kNotRegistered) {
    unknown_log.Warn("unregister of unknown instance {}", instance_id);  // the reference: warning only
  } else {
    return removed.status();
  }
  return Status::Ok();
}

Result<store::ReadAcquisition> ServiceState::AcquireForRetrieve(const IpcKey& key,
                                                                std::span<const store::ObjectKey> keys,
                                                                store::Owner owner) {
  store::ReadRequest request;
  request.keys = keys;
  request.owner = owner;
  request.mode = store::ReadMode::kAllOrNothing;
  request.release_share_on_miss = true;
  Result<store::ReadAcquisition> acquired = Status(ErrorCode::kInternal, "not acquired");
  // This reader's share of the request's lookup locks becomes its own lease
  // (under the session's mutex, so free_lookup_locks and end_session of the
  // same request wait); where the lookup's lease expired or never was, the
  // objects still resident are locked afresh.
  if (std::shared_ptr<Session> session = sessions_.Find(key.request_id)) {
    MutexLock lock(&session->mu);
    const std::vector<store::LeaseId> consumable = session->ConsumableLeases(key.cache_salt);
    request.consume = consumable;
    acquired = table().AcquireRead(request);
  } else {
    acquired = table().AcquireRead(request);
  }
  LMC_RETURN_IF_ERROR(acquired.status());
  if (acquired->missing > 0) {
    return Status(ErrorCode::kNotFound, std::to_string(acquired->missing) + " of " +
                                            std::to_string(keys.size()) +
                                            " chunks are not in L1 (evicted, never stored, or "
                                            "not looked up)");
  }
  return acquired;
}

void ServiceState::ReleaseInstance(const RemovedInstance& removed, ReleaseCause cause) {
  counters_.released[static_cast<std::size_t>(cause)].fetch_add(1, std::memory_order_relaxed);
  // Device copies keep their own leases (Owner::Device) until they end; a
  // GPU registration's context closes once they have.
  for (const auto& listener : registration_listeners_) listener(removed.info.registration);
  store::ObjectTable& objects = table();
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

void ServiceState::ReleaseSession(Session& session) {
  LookupRelease release;
  {
    MutexLock lock(&session.mu);
    release = session.TakeAll();
  }
  Release(release);
}

void ServiceState::ReleaseConnectionLookups(std::string_view connection) {
  // A step at a time: a burst client may have a million sessions.
  for (auto step = sessions_.TakeConnection(connection); !step.empty();
       step = sessions_.TakeConnection(connection)) {
    for (const std::shared_ptr<Session>& session : step) {
      LookupRelease release;
      {
        MutexLock lock(&session->mu);
        release = session->TakeConnection(connection);
      }
      Release(release);
    }
  }
}

void ServiceState::Release(const LookupRelease& release) {
  for (const tier::PrefetchHandle handle : release.prefetches) {
    if (prefetcher_ != nullptr) prefetcher_->Cancel(handle);
  }
  for (const store::LeaseId lease : release.leases) table().ReleaseRead(lease);
}

}  // namespace lmcache::server
