// Service: the protocol's operations, transport-free.
//
// Dispatch() takes a decoded operation and its raw payload frames and returns
// the reply value (frame 3), or a Status that the transport turns into the
// operation's failure value plus an error frame. No ZMQ type appears here, so
// tests drive the service in-process and the transport can be swapped.
//
// Locking: the service keeps no lock of its own beyond the stats counters
// (atomics); it composes internally synchronised parts: ObjectTable,
// InstanceRegistry, SessionManager (and a Session's own mutex while one
// request uses it). Lock order: Session::mu -> ObjectTable shards -> ...;
// the registry's and session manager's mutexes are leaves.
//
// Thread-safety: Dispatch may be called from any number of threads at once.
// Start/Stop (the maintenance thread) belong to the controlling thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "lmcache/status.h"
#include "server/instances.h"
#include "server/messages.h"
#include "server/operations.h"
#include "server/session.h"
#include "store/l1_cache.h"
#include "tier/prefetcher.h"

namespace lmcache::server {

struct ServiceConfig {
  std::int64_t chunk_size = 256;         // --chunk-size, tokens
  TimeMs session_idle_ttl_ms = 600'000;  // --session-ttl-seconds
  std::size_t max_sessions = 1'000'000;
  TimeMs worker_reap_timeout_ms = 120'000;          // --worker-reap-timeout-seconds; 0 = never reap
  TimeMs worker_registration_grace_ms = 3'600'000;  // --worker-registration-grace-seconds
  std::size_t max_prompt_tokens = 4u << 20;         // tokens per key (a 16 MiB msgpack array)
  std::string version = "0.1.0";
  std::string instance_id;  // --instance-id, shown by server_info
};

struct Reply {
  Status status;      // OK: `value` is frame 3. Not OK: the transport answers the failure value.
  std::string value;  // msgpack
};

class Service {
 public:
  // `l1`, `clock` and `prefetcher` must outlive the service. Without a
  // prefetcher (no L2 tier) a lookup completes from L1 at once.
  Service(store::L1Cache* l1, const Clock* clock, const ServiceConfig& config,
          tier::Prefetcher* prefetcher = nullptr);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  Reply Dispatch(const OpSpec& spec, std::span<const std::string_view> payloads);

  // Reaps silent instances and expires idle sessions (what the maintenance
  // thread runs every few seconds).
  void RunMaintenance();
  void StartMaintenance();
  void StopMaintenance();

  // Counts a request that failed before dispatch (bad frames, unknown op).
  void CountTransportError();

  const std::string& boot_id() const { return boot_id_; }
  InstanceRegistry& instances() { return instances_; }
  SessionManager& sessions() { return sessions_; }
  store::ObjectTable& table() { return l1_->table(); }

 private:
  using Payloads = std::span<const std::string_view>;
  Result<std::string> Handle(Op op, Payloads payloads);

  // Engine-driven context and shared-memory transfers (service_transfer.cc).
  Result<std::string> RegisterEngineContext(Payloads p);
  Result<std::string> UnregisterEngineContext(Payloads p);
  Result<std::string> PrepareStore(Payloads p);
  Result<std::string> CommitStore(Payloads p);
  Result<std::string> PrepareRetrieve(Payloads p);
  Result<std::string> CommitRetrieve(Payloads p);
  void ReleaseInstance(const RemovedInstance& removed, const char* why);

  // Lookup and sessions (service_lookup.cc).
  Result<std::string> Lookup(Payloads p);
  enum class StatusQuery { kStatus, kWait, kHits };
  Result<std::string> QueryPrefetchStatus(Payloads p, StatusQuery query);
  Result<std::string> FreeLookupLocks(Payloads p);
  Result<std::string> EndSession(Payloads p);

  // Management (service.cc).
  Result<std::string> Ping(Payloads p);
  Result<std::string> Clear(Payloads p);
  Result<std::string> ServerInfo();
  Result<std::string> Stats();

  struct WorkerKeys;
  Result<WorkerKeys> ResolveWorkerKeys(const IpcKey& key, const InstanceInfo& instance);
  Status CheckKeyRange(const IpcKey& key) const;

  store::L1Cache* const l1_;
  const Clock* const clock_;
  tier::Prefetcher* const prefetcher_;
  const ServiceConfig config_;
  const std::string boot_id_;
  InstanceRegistry instances_;
  SessionManager sessions_;

  static constexpr std::size_t kOpSlots = 128;
  std::array<std::atomic<std::uint64_t>, kOpSlots> requests_{};
  std::array<std::atomic<std::uint64_t>, kOpSlots> errors_{};
  std::atomic<std::uint64_t> transport_errors_{0};
  std::atomic<std::uint64_t> reaped_instances_{0};
  std::atomic<std::uint64_t> block_allocation_reports_{0};

  std::thread maintenance_;
  Mutex maintenance_mu_;
  CondVar maintenance_wake_;
  bool maintenance_stop_ LMC_GUARDED_BY(maintenance_mu_) = false;
};

// A fresh random id (32 hex digits) naming one server start.
std::string NewBootId();

}  // namespace lmcache::server
