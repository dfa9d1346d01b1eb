// ServerStatus: what GET /status and /status/memory-pressure read, in one
// value: the stats snapshot and the server's identity and registrations.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/stats.h"
#include "store/chunk_sizes.h"
#include "worker/instances.h"

namespace lmcache::server {

// One peer of --p2p-peers as membership sees it (fleet/membership.h).
struct P2pPeerStatus {
  std::string url;
  std::string state;   // connecting, ready, excluded, unreachable
  std::string reason;  // why excluded or unreachable
  std::string boot_id;
  std::uint64_t lives = 0;
  double seconds_since_answer = -1;  // -1: it never answered
  double rtt_ms = -1;                // its last handshake's round trip; -1: never answered
  std::uint64_t loaded_bytes = 0;    // loaded from it by this server
  std::uint64_t load_batches = 0;    // batches of reads from it (each one ended)
  std::uint64_t load_failures = 0;   // of them, ended without their bytes
  double load_gbps = 0;              // its recent batches' throughput (moving average)
  // Models it cuts into other chunks (not asked of it); empty when none.
  std::string chunk_sizes_differ;
};

// One etcd:// registration (fleet/etcd_registry.h).
struct P2pEtcdStatus {
  std::string prefix;
  std::vector<std::string> endpoints;
  bool reachable = false;
  bool registered = false;
  std::string last_error;
  std::uint64_t peers = 0;
};

// Cross-node sharing as configured (the figures are in stats.p2p_served).
struct P2pStatus {
  bool enabled = false;            // --p2p-advertise-url given
  std::string advertise_url;       // HOST:PORT peers reach the fleet endpoint at
  std::string key_fingerprint;     // fleet::FleetKey::fingerprint()
  bool serves_unauthenticated = false;  // --p2p-allow-unauthenticated
  std::vector<P2pPeerStatus> peers;
  std::vector<P2pEtcdStatus> etcd;
};

// What GET /status shows: the stats snapshot and the server's identity and
// registrations, taken in one call so the HTTP endpoint reads no service
// internals.
struct ServerStatus {
  StatsSnapshot stats;
  std::string pool_name;        // the L1 segment's shared-memory name
  store::ChunkSizes chunk_sizes;  // --chunk-size, --model-chunk-size
  std::vector<worker::InstanceInfo> instances;
  std::string instance_id;      // --instance-id, or the boot id when none was given
  std::string eviction_policy;  // --eviction-policy
  double eviction_trigger_watermark = 0;  // --eviction-trigger-watermark
  P2pStatus p2p;
};

}  // namespace lmcache::server
