// Service: dispatch, management operations, statistics and maintenance.
#include "server/service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <random>

#include "server/codec.h"
#include "server/service_internal.h"

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

store::OwnerId SessionOwner(const std::string& request_id) {
  return (store::OwnerId{1} << 63) | (std::hash<std::string>{}(request_id) >> 1);
}

std::vector<std::int64_t> AllRanks(std::int64_t world_size) {
  std::vector<std::int64_t> ranks;
  for (std::int64_t w = 0; w < world_size; ++w) ranks.push_back(*store::PackKvRank(world_size, w));
  return ranks;
}

std::vector<store::ObjectKey> ExpandKeys(const std::vector<store::ChunkHash>& hashes,
                                         const std::string& model, const std::string& salt,
                                         const std::vector<std::int64_t>& kv_ranks) {
  std::vector<store::ObjectKey> keys;
  keys.reserve(hashes.size() * kv_ranks.size());
  for (const store::ChunkHash& hash : hashes) {
    for (const std::int64_t rank : kv_ranks) keys.push_back({hash, model, rank, 0, salt});
  }
  return keys;
}

Service::Service(store::L1Cache* l1, const Clock* clock, const ServiceConfig& config,
                 tier::Prefetcher* prefetcher)
    : l1_(l1),
      clock_(clock),
      prefetcher_(prefetcher),
      config_(config),
      boot_id_(NewBootId()),
      instances_(clock),
      sessions_(clock, config.session_idle_ttl_ms, config.max_sessions) {}

Service::~Service() { StopMaintenance(); }

void Service::CountTransportError() { transport_errors_.fetch_add(1, std::memory_order_relaxed); }

Reply Service::Dispatch(const OpSpec& spec, std::span<const std::string_view> payloads) {
  const auto slot = static_cast<std::size_t>(spec.op) % kOpSlots;
  requests_[slot].fetch_add(1, std::memory_order_relaxed);
  Reply reply;
  if (payloads.size() < spec.min_payloads || payloads.size() > spec.max_payloads) {
    reply.status = Status(
        ErrorCode::kMalformedRequest,
        std::string(spec.name) + " takes " + std::to_string(spec.min_payloads) +
            (spec.min_payloads == spec.max_payloads ? ""
                                                    : " to " + std::to_string(spec.max_payloads)) +
            " payload frame(s), got " + std::to_string(payloads.size()));
  } else {
    try {
      auto result = Handle(spec.op, payloads);
      if (result.ok()) {
        reply.value = std::move(result).value();
      } else {
        reply.status = result.status();
      }
    } catch (const std::exception& e) {
      // Handlers report failures as Status; an exception here is a bug, but it
      // must cost one request, not the server.
      reply.status = Internal(std::string(spec.name) + " failed: " + e.what());
      spdlog::error("{}: unexpected exception: {}", spec.name, e.what());
    }
  }
  if (!reply.status.ok()) {
    errors_[slot].fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("{} failed: {}", spec.name, reply.status.ToString());
  }
  return reply;
}

Result<std::string> Service::Handle(Op op, Payloads p) {
  switch (op) {
    case Op::kRegisterEngineContext: return RegisterEngineContext(p);
    case Op::kUnregisterEngineContext: return UnregisterEngineContext(p);
    case Op::kPrepareStore: return PrepareStore(p);
    case Op::kCommitStore: return CommitStore(p);
    case Op::kPrepareRetrieve: return PrepareRetrieve(p);
    case Op::kCommitRetrieve: return CommitRetrieve(p);
    case Op::kLookup: return Lookup(p);
    case Op::kQueryPrefetchStatus: return QueryPrefetchStatus(p, StatusQuery::kStatus);
    case Op::kWaitPrefetchStatus: return QueryPrefetchStatus(p, StatusQuery::kWait);
    case Op::kQueryPrefetchLookupHits: return QueryPrefetchStatus(p, StatusQuery::kHits);
    case Op::kFreeLookupLocks: return FreeLookupLocks(p);
    case Op::kEndSession: return EndSession(p);
    case Op::kPing: return Ping(p);
    case Op::kClear: return Clear(p);
    case Op::kGetChunkSize: return Encoder().Int(config_.chunk_size).Take();
    case Op::kNoop: return Encoder().Str("OK").Take();
    case Op::kGetExperimental: return Encoder().Array(0).Take();
    case Op::kReportBlockAllocation:
      block_allocation_reports_.fetch_add(1, std::memory_order_relaxed);
      return Encoder().Nil().Take();
    case Op::kServerInfo: return ServerInfo();
    case Op::kStats: return Stats();
    case Op::kRegisterKvCache:
    case Op::kUnregisterKvCache:
    case Op::kStore:
    case Op::kRetrieve:
      return Status(ErrorCode::kNotSupported,
                    std::string(SpecOf(op).name) +
                        ": the CUDA-IPC path (server-side GPU copies) is not available in this "
                        "server yet; use the shared-memory path (register_kv_cache_engine_driven_"
                        "context, prepare_store/commit_store, prepare_retrieve/commit_retrieve)");
    default:
      return Status(ErrorCode::kNotSupported,
                    std::string(SpecOf(op).name) +
                        " is not supported by lmcache-server (CacheBlend, p2p, QStore and KV "
                        "events are out of scope)");
  }
}

Result<std::string> Service::Ping(Payloads p) {
  if (!p.empty()) {
    LMC_ASSIGN_OR_RETURN(const std::optional<std::int64_t> instance,
                         DecodeOptionalInt(p[0], "instance_id"));
    // An unknown instance still gets True, as from the reference: the
    // heartbeat is about the server; prepare/commit report NOT_REGISTERED.
    if (instance) (void)instances_.Touch(*instance);
  }
  return Encoder().Bool(true).Take();
}

Result<std::string> Service::Clear(Payloads p) {
  bool force = false;
  if (!p.empty()) {
    LMC_ASSIGN_OR_RETURN(const std::optional<std::int64_t> value, DecodeOptionalInt(p[0], "force"));
    force = value.value_or(0) != 0;
  }
  const std::uint64_t cleared = table().Clear(force);
  spdlog::info("clear(force={}): {} objects removed", force, cleared);
  return Encoder().Nil().Take();
}

Result<std::string> Service::ServerInfo() {
  Encoder e;
  e.Map(9);
  e.Str("version").Str(config_.version);
  e.Str("instance_id").Str(config_.instance_id);
  e.Str("boot_id").Str(boot_id_);
  e.Str("pid").Int(static_cast<std::int64_t>(getpid()));
  e.Str("shm_name").Str(l1_->segment().name());
  e.Str("pool_size").Uint(l1_->segment().size());
  e.Str("chunk_size").Int(config_.chunk_size);
  e.Str("hash_algorithm").Str("blake3");
  e.Str("features").Array(2).Str("shm").Str("engine_driven");
  return e.Take();
}

Result<std::string> Service::Stats() {
  const alloc::AllocatorStats alloc = l1_->allocator().Stats();
  const store::TableStats table_stats = table().Stats();
  const store::EvictorStats eviction = l1_->evictor().Stats();
  std::uint32_t ops_with_traffic = 0;
  for (std::size_t i = 0; i < kOpSlots; ++i) ops_with_traffic += requests_[i].load() > 0;
  Encoder e;
  e.Map(6);
  e.Str("l1").Map(12);
  e.Str("capacity_bytes").Uint(alloc.capacity_bytes);
  e.Str("used_bytes").Uint(alloc.used_bytes);
  e.Str("resident_bytes").Uint(table_stats.resident_bytes);
  e.Str("staging_bytes").Uint(table_stats.staging_bytes);
  e.Str("locked_bytes").Uint(table_stats.locked_bytes);
  e.Str("retired_bytes").Uint(table_stats.retired_bytes);
  e.Str("resident_objects").Uint(table_stats.resident_objects);
  e.Str("staging_objects").Uint(table_stats.staging_objects);
  e.Str("locked_objects").Uint(table_stats.locked_objects);
  e.Str("largest_allocatable_bytes").Uint(alloc.largest_allocatable_bytes);
  e.Str("fragmentation").Float(alloc.fragmentation);
  e.Str("failed_allocations").Uint(alloc.failed_allocations);
  e.Str("eviction").Map(7);
  e.Str("passes").Uint(eviction.passes);
  e.Str("triggered_passes").Uint(eviction.triggered_passes);
  e.Str("errors").Uint(eviction.errors);
  e.Str("evicted_objects").Uint(table_stats.evicted_objects);
  e.Str("evicted_bytes").Uint(table_stats.evicted_bytes);
  e.Str("on_demand_evictions").Uint(table_stats.on_demand_evictions);
  e.Str("last_success_unix_seconds").Float(eviction.last_success_wall_seconds);
  e.Str("operations").Map(ops_with_traffic);
  for (std::size_t i = 0; i < kOpSlots; ++i) {
    const std::uint64_t count = requests_[i].load();
    if (count == 0) continue;
    e.Str(SpecOf(static_cast<Op>(i)).name).Map(2);
    e.Str("requests").Uint(count);
    e.Str("errors").Uint(errors_[i].load());
  }
  e.Str("transport_errors").Uint(transport_errors_.load());
  e.Str("instances").Map(4);
  e.Str("registered").Uint(instances_.size());
  e.Str("pending_writes").Uint(instances_.pending_writes());
  e.Str("pending_reads").Uint(instances_.pending_reads());
  e.Str("reaped").Uint(reaped_instances_.load());
  e.Str("sessions").Uint(sessions_.size());
  return e.Take();
}

void Service::RunMaintenance() {
  if (config_.worker_reap_timeout_ms > 0) {
    for (const std::int64_t id :
         instances_.Silent(config_.worker_reap_timeout_ms, config_.worker_registration_grace_ms)) {
      if (auto removed = instances_.Unregister(id)) {
        ReleaseInstance(*removed, "reaped after silence");
        reaped_instances_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  if (const std::size_t expired = sessions_.ExpireIdle(); expired > 0) {
    spdlog::debug("expired {} idle sessions", expired);
  }
}

void Service::StartMaintenance() {
  if (maintenance_.joinable()) return;
  const TimeMs reap = config_.worker_reap_timeout_ms;
  // A quarter of the reap timeout (as the reference), at most 5 s so sessions expire promptly.
  const auto period = std::chrono::milliseconds(reap > 0 ? std::min<TimeMs>(reap / 4, 5000) : 5000);
  maintenance_ = std::thread([this, period] {
    while (true) {
      {
        MutexLock lock(&maintenance_mu_);
        if (!maintenance_stop_) maintenance_wake_.WaitFor(&lock, period);
        if (maintenance_stop_) return;
      }
      try {
        RunMaintenance();
      } catch (const std::exception& e) {
        spdlog::error("maintenance pass failed (it goes on): {}", e.what());
      }
    }
  });
}

void Service::StopMaintenance() {
  {
    MutexLock lock(&maintenance_mu_);
    maintenance_stop_ = true;
  }
  maintenance_wake_.NotifyAll();
  if (maintenance_.joinable()) maintenance_.join();
}

}  // namespace lmcache::server
