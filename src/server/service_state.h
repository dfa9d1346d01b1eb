// ServiceState: what every operation family shares, and the rules they share.
//
// The L1 cache, the registry of instances, the sessions, the chunk hasher,
// the configuration and the counters that are not per operation. Families
// (transfer_ops, lookup_ops, admin_ops, ...) hold a pointer to it and never to
// each other.
//
// Thread-safety: the members are internally synchronised (see each one's
// header); the configuration and boot id are immutable after construction.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "lmcache/messages.h"
#include "lmcache/status.h"
#include "protocol/wire_codec.h"
#include "server/chunk_hasher.h"
#include "server/instances.h"
#include "server/request.h"
#include "server/session.h"
#include "store/l1_cache.h"
#include "server/parked_requests.h"
#include "tier/prefetcher.h"

namespace lmcache::server {

// Who may run destructive operations (clear), --admin-ops.
enum class AdminAccess : std::uint8_t {
  kAny,    // every connection
  kLocal,  // ipc sockets and tcp peers on a loopback address
  kIpc,    // ipc sockets only (the default): their 0600 mode decides who
  kOff,    // nobody
};

struct ServiceConfig {
  std::int64_t chunk_size = 256;  // --chunk-size, tokens
  SessionLimits sessions;         // --session-ttl-seconds, --session-memory-mb
  TimeMs worker_reap_timeout_ms = 120'000;          // --worker-reap-timeout-seconds; 0 = never
  TimeMs worker_registration_grace_ms = 3'600'000;  // --worker-registration-grace-seconds
  protocol::KeyLimits key_limits;                   // tokens per key (a 16 MiB msgpack array)
  std::size_t hash_cache_bytes = 64u << 20;         // --hash-cache-mb
  std::size_t max_pending_transfers = 16384;        // per instance and direction
  ParkedLimits parked;  // requests waiting without a thread, per client and in all
  AdminAccess admin_access = AdminAccess::kIpc;
  std::string instance_id;  // --instance-id, shown by server_info
  // --supported-transfer-mode: "auto" (every mode), "engine_driven" or "lmcache_driven".
  std::string transfer_mode = "auto";
  std::string gpu_backend = "cuda";          // --gpu-backend
  std::int64_t gpu_event_timeout_ms = 10'000;  // --gpu-event-timeout-ms
};

struct ServiceCounters {
  // Registrations ended, by ReleaseCause (ServiceState::ReleaseInstance counts).
  std::array<std::atomic<std::uint64_t>, kReleaseCauses> released{};
  std::atomic<std::uint64_t> block_allocation_reports{0};
  std::atomic<std::uint64_t> lookups{0};
  std::atomic<std::uint64_t> lookup_requested_tokens{0};
  std::atomic<std::uint64_t> lookup_hit_tokens{0};
};

// What every transfer operation of both modes names first: the key and the
// registered instance.
struct TransferTarget {
  IpcKey key;
  std::int64_t instance_id = 0;
};
Result<TransferTarget> DecodeTransferTarget(Payloads p, const protocol::KeyLimits& limits);

// The objects one worker's transfer names: chunks [start, end) on its own rank.
struct WorkerKeys {
  InstanceInfo instance;
  std::vector<store::ObjectKey> keys;
  std::string transfer;  // names the transfer among the instance's pending ones
};

class ServiceState {
 public:
  // `l1`, `clock` and `prefetcher` (may be null) must outlive the state.
  ServiceState(store::L1Cache* l1, const Clock* clock, const ServiceConfig& config,
               tier::Prefetcher* prefetcher);
  ~ServiceState();  // answers every parked request first (kDrained)

  store::L1Cache& l1() { return *l1_; }
  store::ObjectTable& table() { return l1_->table(); }
  const Clock& clock() const { return *clock_; }
  tier::Prefetcher* prefetcher() const { return prefetcher_; }
  const ServiceConfig& config() const { return config_; }
  const std::string& boot_id() const { return boot_id_; }
  InstanceRegistry& instances() { return instances_; }
  SessionManager& sessions() { return sessions_; }
  // Requests waiting without a thread (deferred replies).
  ParkedRequests& parked() { return *parked_; }
  ChunkHasher& hasher() { return hasher_; }
  ServiceCounters& counters() { return counters_; }
  // Called with a registration's serial when it goes (unregister, the
  // reaper, a re-registration from another connection, its connection
  // closing), after its leases were released; transfer modes drop what they
  // hold for it. Added before serving; must not block.
  void AddRegistrationListener(std::function<void(std::uint64_t registration)> listener) {
    registration_listeners_.push_back(std::move(listener));
  }
  // While draining (SIGTERM), new registrations are refused; registered
  // workers are served until they leave.
  void set_draining(bool draining) { draining_.store(draining, std::memory_order_release); }
  bool draining() const { return draining_.load(std::memory_order_acquire); }

  // The key's range must be chunk-aligned and inside its tokens, its model
  // name and cache salt valid.
  Status CheckKeyRange(const IpcKey& key) const;
  // The registration `context` made of `instance_id` (see InstanceRegistry::Authorize).
  Result<InstanceInfo> Authorize(std::int64_t instance_id, const RequestContext& context);
  // The objects of a worker's transfer: its rank, chunks [start, end).
  Result<WorkerKeys> ResolveWorkerKeys(const IpcKey& key, const InstanceInfo& instance);
  // The object layout of an engine-driven registration, checked: the
  // registrant (below), and one chunk fits L1.
  Result<ChunkLayout> CheckRegistration(const EngineContext& engine, const RequestContext& context);
  // Model name, world size, and not draining (unless the connection re-registers).
  Status CheckRegistrant(const EngineContext& engine, const RequestContext& context);
  // One object of `layout` fits in L1.
  Status CheckFits(const ChunkLayout& layout);
  // Unregisters on behalf of the connection that registered it and releases
  // what it left; an unknown instance is only logged (as the reference).
  Status Unregister(std::int64_t instance_id, const RequestContext& context);
  // Read-locks every object of a retrieve or none (kNotFound naming how many
  // are missing) under a new lease of `owner`, taking over this reader's share
  // of the request's lookup locks where the lookup still holds them.
  Result<store::ReadAcquisition> AcquireForRetrieve(const IpcKey& key,
                                                    std::span<const store::ObjectKey> keys,
                                                    store::Owner owner);
  // Releases everything a registration left behind (pending writes are
  // aborted, never published; pending reads released), logging `why`.
  void ReleaseInstance(const RemovedInstance& removed, ReleaseCause cause);
  // Releases every lease a session holds (ended, expired or dropped) and
  // cancels its prefetches.
  void ReleaseSession(Session& session);
  // Releases what a session handed back.
  void Release(const LookupRelease& release);
  // Releases what the lookups `connection` made still hold (it closed).
  void ReleaseConnectionLookups(std::string_view connection);

 private:
  store::L1Cache* const l1_;
  const Clock* const clock_;
  tier::Prefetcher* const prefetcher_;
  const ServiceConfig config_;
  const std::string boot_id_;
  ServiceCounters counters_;
  std::atomic<bool> draining_{false};
  InstanceRegistry instances_;
  SessionManager sessions_;
  std::shared_ptr<ParkedRequests> parked_;  // shared: wakers hold it weakly
  ChunkHasher hasher_;
  std::vector<std::function<void(std::uint64_t)>> registration_listeners_;
};

// A fresh random id (32 hex digits) naming one server start.
std::string NewBootId();

// Object keys of chunks [0, hashes.size()) for every rank in `kv_ranks`,
// chunk-major and rank-minor (spec 5.5), in the layout namespace `layout`.
std::vector<store::ObjectKey> ExpandKeys(std::span<const store::ChunkHash> hashes,
                                         const std::string& model, const std::string& salt,
                                         std::span<const std::int64_t> kv_ranks,
                                         std::uint32_t layout);

// kv_rank of every worker of a world.
std::vector<std::int64_t> AllRanks(std::int64_t world_size);

}  // namespace lmcache::server
