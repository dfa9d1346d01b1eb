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

namespace {

fleet::PeerTaskConfig PeerTaskConfigOf(const ServiceConfig& config,
                                       const store::ObjectTable& table) {
  fleet::PeerTaskConfig peers;
  peers.query_timeout_ms = config.p2p_lookup_timeout_ms;
  peers.read_ttl_ms = table.config().read_ttl_ms;
  peers.max_locked_bytes_total = static_cast<std::uint64_t>(
      config.p2p_max_locked_fraction * static_cast<double>(table.allocator().capacity_bytes()));
  // Drawn per boot: a task id a peer holds across this server's restart
  // names no task of the new one (the reference counts from 0 every time).
  peers.first_task_id = static_cast<std::int64_t>(std::random_device{}() & 0x3fffffff) << 16;
  return peers;
}

}  // namespace

ServiceState::ServiceState(store::L1Cache* l1, const Clock* clock, const ServiceConfig& config,
                           tier::Prefetcher* prefetcher, events::KvEvents* events)
    : l1_(l1),
      clock_(clock),
      prefetcher_(prefetcher),
      events_(events),
      config_(config),
      boot_id_(NewBootId()),
      instances_(clock, config.max_pending_transfers),
      leases_(&sessions_, &l1->table(), prefetcher),  // sessions_ is only pointed at here
      sessions_(clock, config.sessions,
                [this](worker::Session& session) { leases_.ReleaseSession(session); }),
      parked_(ParkedRequests::Create(clock, config.parked)),
      hasher_(config.hash_cache_bytes),
      instance_rules_(&instances_, l1, &hasher_, &config_.chunk_sizes, token_bindings()),
      kv_streams_(events),
      peer_tasks_(&l1->table(), clock, PeerTaskConfigOf(config, l1->table())) {}

ServiceState::~ServiceState() {
  parked_->Drain();
  kv_streams_.Drain();
}

}  // namespace lmcache::server
