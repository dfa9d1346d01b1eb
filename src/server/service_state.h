// ServiceState: the parts every operation family draws from, owned in one
// place: the L1 cache, the registry of instances and its rules
// (InstanceRules), the sessions and their read leases (LookupLeases), the
// parked requests, the chunk hasher, the configuration and the counters that
// are not per operation. The service hands each family only the parts it
// uses (its Deps, in its header); families never see this class or each
// other.
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
#include "events/kv_events.h"
#include "lmcache/messages.h"
#include "lmcache/status.h"
#include "protocol/wire_codec.h"
#include "worker/chunk_hasher.h"
#include "worker/instances.h"
#include "worker/key_rules.h"
#include "server/kv_event_streams.h"
#include "worker/lookup_leases.h"
#include "worker/instance_rules.h"
#include "server/request.h"
#include "server/service_config.h"
#include "worker/session.h"
#include "store/l1_cache.h"
#include "server/parked_requests.h"
#include "fleet/peer_tasks.h"
#include "tier/prefetcher.h"

namespace lmcache::server {

class ServiceState {
 public:
  // `l1`, `clock`, `prefetcher` and `events` (each of the last two may be
  // null) must outlive the state.
  ServiceState(store::L1Cache* l1, const Clock* clock, const ServiceConfig& config,
               tier::Prefetcher* prefetcher, events::KvEvents* events);
  ~ServiceState();  // answers every parked request and ends every stream first

  store::L1Cache& l1() { return *l1_; }
  store::ObjectTable& table() { return l1_->table(); }
  const Clock& clock() const { return *clock_; }
  tier::Prefetcher* prefetcher() const { return prefetcher_; }
  events::KvEvents* events() const { return events_; }
  // Where stores and L2-bound lookups leave chunks' tokens for the KV
  // events; null when the channel is off.
  events::TokenBindings* token_bindings() const {
    return events_ != nullptr && events_->enabled() ? &events_->bindings() : nullptr;
  }
  const ServiceConfig& config() const { return config_; }
  const std::string& boot_id() const { return boot_id_; }
  worker::InstanceRegistry& instances() { return instances_; }
  worker::SessionManager& sessions() { return sessions_; }
  // Requests waiting without a thread (deferred replies).
  ParkedRequests& parked() { return *parked_; }
  // The subscribe_kv_events streams.
  KvEventStreams& kv_streams() { return kv_streams_; }
  worker::ChunkHasher& hasher() { return hasher_; }
  ServiceCounters& counters() { return counters_; }
  worker::InstanceRules& instance_rules() { return instance_rules_; }
  worker::LookupLeases& leases() { return leases_; }
  // The peers' lookups on this server's L1 (p2p_lookup_and_lock).
  fleet::PeerTasks& peer_tasks() { return peer_tasks_; }

 private:
  store::L1Cache* const l1_;
  const Clock* const clock_;
  tier::Prefetcher* const prefetcher_;
  events::KvEvents* const events_;
  const ServiceConfig config_;
  const std::string boot_id_;
  ServiceCounters counters_;
  worker::InstanceRegistry instances_;
  // Before sessions_: an expiring session releases through it, until the
  // sessions are gone.
  worker::LookupLeases leases_;
  worker::SessionManager sessions_;
  std::shared_ptr<ParkedRequests> parked_;  // shared: wakers hold it weakly
  worker::ChunkHasher hasher_;
  worker::InstanceRules instance_rules_;
  KvEventStreams kv_streams_;
  fleet::PeerTasks peer_tasks_;
};

// A fresh random id (32 hex digits) naming one server start.
std::string NewBootId();

}  // namespace lmcache::server
