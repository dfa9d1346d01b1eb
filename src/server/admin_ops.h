// AdminOps: management operations (ping, clear, get_chunk_size, noop,
// get_experimental, report_block_allocation; ours: server_info, stats) and
// KV events: poll_kv_events, and the subscribe_kv_events stream; and the
// rows of the operations this server answers "not supported" (QStore,
// CacheBlend, per-chunk store events).
//
// Thread-safety: the handlers may run on any threads at once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "events/kv_events.h"
#include "fleet/peer_info.h"
#include "server/kv_event_streams.h"
#include "server/op_table.h"
#include "worker/instances.h"
#include "server/service_config.h"
#include "shm/shm_segment.h"
#include "store/object_table.h"

namespace lmcache::server {

// This server's P2P handshake (fleet/peer_info.h): what server_info tells a
// fleet member, and what membership checks peers against.
fleet::PeerInfo OwnPeerInfo(const ServiceConfig& config, const std::string& boot_id);

class AdminOps {
 public:
  // What the family uses of the service, and nothing else.
  struct Deps {
    const ServiceConfig& config;
    const std::string& boot_id;
    shm::ShmSegment& pool;  // server_info names it
    store::ObjectTable& table;  // clear
    worker::InstanceRegistry& instances;  // ping's heartbeat
    ServiceCounters& counters;
    events::KvEvents* events;  // null: the KV event channel is off
    KvEventStreams& kv_streams;  // subscribe_kv_events
  };
  // `render_stats` encodes the stats reply (the service's snapshot);
  // `features` are what server_info announces (the serving transfer modes').
  AdminOps(const Deps& deps, std::function<std::string()> render_stats,
           std::vector<std::string> features)
      : deps_(deps), render_stats_(std::move(render_stats)), features_(std::move(features)) {}
  void AddTo(OpTable* table);
  // Rows of the operations that answer NOT_SUPPORTED.
  static void AddUnsupported(OpTable* table);

 private:
  Result<std::string> Ping(const RequestContext& context, std::optional<std::int64_t> instance);
  // Removes every object (locked ones too with `force`: they retire when
  // their leases end); the objects removed, or why `context` may not.
  Result<std::uint64_t> Clear(const RequestContext& context, bool force);
  // Every client gets the server's identity and geometry; a fleet member
  // also gets the P2P handshake's map (fleet/peer_info.h).
  Result<std::string> ServerInfo(const RequestContext& context) const;
  // A page of `model_name`'s KV events after `cursor` (the reference's
  // KVEventPollResult); enabled = false when the channel is off.
  Result<std::string> PollKvEvents(const std::string& model_name, std::int64_t cursor,
                                   std::int64_t max_events) const;

  const Deps deps_;
  const std::function<std::string()> render_stats_;
  const std::vector<std::string> features_;
};

// Whether `context` may run a destructive operation under `access`.
bool MayRunDestructive(AdminAccess access, const RequestContext& context);

}  // namespace lmcache::server
