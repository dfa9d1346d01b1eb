#include "server/service_state.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "common/blake3.h"

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

std::vector<std::int64_t> AllRanks(std::int64_t world_size) {
  std::vector<std::int64_t> ranks;
  for (std::int64_t w = 0; w < world_size; ++w) ranks.push_back(*store::PackKvRank(world_size, w));
  return ranks;
}

std::vector<store::ObjectKey> ExpandKeys(std::span<const store::ChunkHash> hashes,
                                         const std::string& model, const std::string& salt,
                                         std::span<const std::int64_t> kv_ranks) {
  std::vector<store::ObjectKey> keys;
  keys.reserve(hashes.size() * kv_ranks.size());
  for (const store::ChunkHash& hash : hashes) {
    for (const std::int64_t rank : kv_ranks) keys.push_back({hash, model, rank, 0, salt});
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
      hasher_(static_cast<std::size_t>(config.chunk_size), config.hash_cache_bytes) {}

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
  out.keys = ExpandKeys(range, key.model_name, key.cache_salt, std::span(&kv_rank, 1));
  out.transfer = key.model_name + "|" + std::to_string(kv_rank) + "|" + key.cache_salt + "|" +
                 std::to_string(key.start) + "|" + std::to_string(key.end) + "|" +
                 (hashes.empty() ? std::string() : ToHex(hashes.back()));
  return out;
}

void ServiceState::ReleaseInstance(const RemovedInstance& removed, const char* why) {
  store::ObjectTable& objects = table();
  std::size_t aborted = 0;
  std::size_t released = 0;
  // Half-written objects are never published: the staged copies are dropped.
  for (const store::LeaseId lease : removed.writes) aborted += objects.AbortWrite(lease);
  for (const store::LeaseId lease : removed.reads) released += objects.ReleaseRead(lease);
  // Anything the registration still holds (a prepare that lost the race with
  // this removal releases its own lease as well).
  const store::OwnerReleaseReport rest = objects.ReleaseOwner(removed.info.owner());
  spdlog::info("instance {} {}: {} staged writes aborted, {} read locks released",
               removed.info.instance_id, why, aborted + rest.writes_aborted,
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
  for (const std::shared_ptr<Session>& session : sessions_.TakeConnection(connection)) {
    LookupRelease release;
    {
      MutexLock lock(&session->mu);
      release = session->TakeConnection(connection);
    }
    Release(release);
  }
}

void ServiceState::Release(const LookupRelease& release) {
  for (const tier::PrefetchHandle handle : release.prefetches) {
    if (prefetcher_ != nullptr) prefetcher_->Cancel(handle);
  }
  for (const store::LeaseId lease : release.leases) table().ReleaseRead(lease);
}

}  // namespace lmcache::server
