// The P2P flags of lmcache-server (issue 42; the reference's group "P2P",
// p2p-spec.md section 2.1) and their validation: what turns cross-node
// sharing on, where the fleet endpoint listens, the fleet key, and the
// owner side's deadlines.
//
// --p2p-advertise-url non-empty turns P2P on: the fleet endpoint binds
// --p2p-listen-url (default: the advertised address), and
// --p2p-auth-key-file is required (fleet/fleet_key.h says what a key file
// must be). The reference's transfer engines other than ucx are refused by
// name.
//
// Thread-safety: plain data and functions; used on the main thread at start.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fleet/peer_source.h"
#include "lmcache/status.h"

namespace lmcache::fleet {
class FleetKey;
}

namespace lmcache::daemon {

struct ServerConfig;

struct P2pFlags {
  std::string advertise_url;  // HOST:PORT; non-empty turns P2P on
  std::string listen_url;     // HOST:PORT; "" = the advertised one
  std::string auth_key_file;
  std::string transfer_engine = "ucx";
  bool allow_unauthenticated = false;
  double lookup_timeout_seconds = 30;
  double load_timeout_seconds = 30;
  std::string peers_list;  // --p2p-peers as given
  bool keep_loaded = true;  // a chunk loaded from a peer stays in L1 as our own
  bool verify_bytes = true;  // --p2p-verify-bytes: a keyed digest checks each read's bytes
  std::size_t max_connections_per_source = 64;  // --p2p-max-connections-per-source
  double max_locked_fraction = 0.5;  // --p2p-max-locked-fraction
  std::size_t max_peers = 256;       // --p2p-max-peers
  std::string etcd_user;             // --p2p-etcd-user
  std::string etcd_password_file;    // --p2p-etcd-password-file
  std::string etcd_password;         // its content (FinalizeP2p)
  double probe_interval_seconds = 5;  // each peer asked again this often
  double call_timeout_seconds = 3;    // a handshake or probe unanswered this long: unreachable
  std::string lookup_mode = "directed";  // --p2p-lookup: directed | broadcast
  double etcd_ttl_seconds = 10;          // etcd:// registrations' lease
  double directory_poll_seconds = 0.1;   // each peer's chunk log read this often
  std::uint64_t chunk_log_chunks = 1u << 20;  // --p2p-chunk-log-size
  // --p2p-last-copy-bias: how far eviction keeps the fleet's last copies
  // before copies other nodes keep, as a fraction of L1's objects (0: off).
  double last_copy_bias = 4;

  // Filled by FinalizeP2p: the peers' sources (tcp:// and dns:// entries),

  // the loaded key (P2P on only), and the fleet endpoint's URL (tcp://listen).
  std::vector<fleet::PeerSource> peers;
  std::shared_ptr<const fleet::FleetKey> key;
  std::string fleet_endpoint;
  std::string listen_host;  // the fleet endpoint's (FinalizeP2p)
  // The requester's deadlines, in ms (FinalizeP2p).
  std::int64_t lookup_timeout_ms = 0;
  std::int64_t load_timeout_ms = 0;
  std::int64_t probe_interval_ms = 0;
  std::int64_t call_timeout_ms = 0;
  std::int64_t directory_poll_ms = 0;
  std::int64_t etcd_ttl_ms = 0;
  bool directed() const { return lookup_mode == "directed"; }
  bool enabled() const { return !advertise_url.empty(); }
};

void AddP2pFlags(CLI::App& app, P2pFlags* flags);

// Checks the P2P flags, loads the fleet key and fills the router's fleet
// endpoint and the service's P2P settings; with peers listed and no p2p
// entry among the --l2-adapter values, puts the peers first in the L2
// cascade. Refusals name the flag.
Status FinalizeP2p(ServerConfig* config);

// The UCX network devices the data channel may use, so that it listens
// where the fleet endpoint does: the interface holding `listen_host`; ""
// (UCX's choice: every device) when the operator set UCX_NET_DEVICES or the
// host is a wildcard. Refused when no interface of this host holds it.
Result<std::string> DataChannelDevices(const std::string& listen_host);

}  // namespace lmcache::daemon
