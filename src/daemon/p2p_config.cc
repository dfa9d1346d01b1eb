#include "daemon/p2p_config.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

#include "common/host_port.h"
#include "common/net_interfaces.h"
#include "daemon/config.h"
#include "fleet/fleet_key.h"

namespace lmcache::daemon {
namespace {

// Engines the reference offers; each is refused naming the one we have.
constexpr const char* kReferenceEngines[] = {"nixl", "mooncake_te", "verbs", "cxl", "tcp"};

Status CheckEngine(const std::string& engine) {
  if (engine == "ucx") return Status::Ok();
  for (const char* name : kReferenceEngines) {
    if (engine == name) {
      return InvalidConfig("--p2p-transfer-engine " + engine +
                           ": this server reads peers' memory through UCX, which runs over RDMA "
                           "verbs, shared memory or TCP as the host allows (restrict it with "
                           "UCX_TLS); give --p2p-transfer-engine ucx");
    }
  }
  return InvalidConfig("--p2p-transfer-engine: unknown engine '" + engine + "'; give ucx");
}

Result<HostPort> ParseUrlFlag(const char* flag, const std::string& text) {
  Result<HostPort> parsed = ParseHostPort(text);
  if (!parsed.ok()) {
    return InvalidConfig(std::string(flag) + " '" + text + "': " + parsed.status().message() +
                         " (give HOST:PORT)");
  }
  return parsed;
}

}  // namespace

// The data channel listens where the fleet endpoint does: on the interface
// of the listen address, or where the operator's UCX_NET_DEVICES says.
Result<std::string> DataChannelDevices(const std::string& listen_host) {
  if (const char* chosen = std::getenv("UCX_NET_DEVICES"); chosen != nullptr) {
    spdlog::info("the data channel uses UCX_NET_DEVICES={} (as set)", chosen);
    return std::string();
  }
  if (listen_host == "0.0.0.0" || listen_host == "::" || listen_host == "*") {
    spdlog::warn("the fleet endpoint listens on every interface ({}): so does the data "
                 "channel; name one address in --p2p-listen-url, or set UCX_NET_DEVICES",
                 listen_host);
    return std::string();
  }
  Result<std::string> device = InterfaceOfHost(listen_host);
  if (!device.ok()) {
    return InvalidConfig("the fleet listens on '" + listen_host + "' (--p2p-listen-url, or "
                         "--p2p-advertise-url without it), and the data channel must listen "
                         "on that address's interface: " + device.status().message() +
                         "; listen on an address of this host, or set UCX_NET_DEVICES");
  }
  return *device;
}

// --p2p-etcd-user needs --p2p-etcd-password-file (and the other way): a
// regular file of the server's user (or root), closed to group and others.
static Status LoadEtcdPassword(P2pFlags* p) {
  if (p->etcd_user.empty() != p->etcd_password_file.empty()) {
    return InvalidConfig("--p2p-etcd-user and --p2p-etcd-password-file go together: give both "
                         "for etcd's own authentication, or neither");
  }
  if (p->etcd_user.empty()) return Status::Ok();
  const std::string& path = p->etcd_password_file;
  std::ifstream file(path);
  struct stat st {};
  if (!file || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return InvalidConfig("--p2p-etcd-password-file " + path + ": cannot read it as a file");
  }
  if ((st.st_mode & 077) != 0 || (st.st_uid != ::geteuid() && st.st_uid != 0)) {
    return InvalidConfig("--p2p-etcd-password-file " + path +
                         " must be the server's user's (or root's) and closed to group and "
                         "others: chmod 600 " + path);
  }
  std::getline(file, p->etcd_password);
  if (p->etcd_password.empty()) {
    return InvalidConfig("--p2p-etcd-password-file " + path + " holds no password");
  }
  return Status::Ok();
}

void AddP2pFlags(CLI::App& app, P2pFlags* p) {
  const char* group = "P2P (cross-node sharing)";
  app.add_option("--p2p-advertise-url", p->advertise_url,
                 "HOST:PORT at which peers reach this server's fleet endpoint; non-empty turns "
                 "P2P on (needs --p2p-auth-key-file)")
      ->group(group);
  app.add_option("--p2p-listen-url", p->listen_url,
                 "HOST:PORT the fleet endpoint binds (e.g. 0.0.0.0:5556); default: the "
                 "advertised one")
      ->group(group);
  app.add_option("--p2p-auth-key-file", p->auth_key_file,
                 "The fleet key: a file of 32 to 65536 random bytes, mode 0600 (or root's, "
                 "0440, as a Kubernetes Secret), the same on every server of the fleet; peers prove it to each other (CurveZMQ keys derived "
                 "from it) before any lock or address is given")
      ->group(group);
  app.add_flag("--p2p-allow-unauthenticated", p->allow_unauthenticated,
               "Serve p2p_lookup_and_lock to connections that did not prove the fleet key, as "
               "the reference does (fleets mixed with reference servers): anyone who reaches "
               "the main endpoint can then lock objects and learn their addresses")
      ->group(group);
  app.add_option("--p2p-lookup-timeout", p->lookup_timeout_seconds,
                 "Seconds a peer's lookup waits to be queried before its locks are released "
                 "(the reference's name and default)")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-load-timeout", p->load_timeout_seconds,
                 "Seconds a read of chunks from a peer may take before they count as not "
                 "loaded (the reference's name and default)")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-peers", p->peers_list,
                 "The peers to share with, comma-separated: tcp://HOST:PORT (a peer's fleet "
                 "endpoint, as it advertises it), dns://NAME:PORT (every address NAME "
                 "resolves to, re-resolved every 5 s: a headless Service over a DaemonSet), or "
                 "etcd://HOST:PORT/PREFIX (the servers registered under PREFIX in etcd, where "
                 "this one registers too; entries of one PREFIX are one cluster's members, "
                 "tried in turn); this server's own address is skipped")
      ->group(group);
  app.add_option("--p2p-keep-loaded", p->keep_loaded,
                 "Keep a chunk loaded from a peer in L1 as an ordinary object, with its KV "
                 "event, so its next use is local (true); false serves it only to the request "
                 "that asked for it and frees it with that request's last lock, as the "
                 "reference does (no second copy in the fleet, every use crosses the wire)")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-verify-bytes", p->verify_bytes,
                 "Check every chunk read from a peer against the owner's keyed digest of it "
                 "(BLAKE3 under the fleet key) before it is admitted (true); false trusts the "
                 "transport for the bytes after an authenticated header (docs/security.md: "
                 "what that gives up)")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-max-connections-per-source", p->max_connections_per_source,
                 "Connections one source address may hold to the fleet endpoint; those beyond "
                 "are closed as they arrive (a member holds a few; every server of a fleet run "
                 "on one host shares its loopback address)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->group(group);
  app.add_option("--p2p-max-locked-fraction", p->max_locked_fraction,
                 "The fraction of the L1 pool that peers' lookups may hold locked together; "
                 "keys past it are answered as misses (counted as refused_keys)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group(group);
  app.add_option("--p2p-max-peers", p->max_peers,
                 "The most peers this server meets; peers its sources list beyond it are "
                 "refused, logged and counted (p2p.peers.refused)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->group(group);
  app.add_option("--p2p-etcd-user", p->etcd_user,
                 "etcd's own authentication for etcd:// peers: the user this server "
                 "authenticates as (needs --p2p-etcd-password-file); its role should allow "
                 "reading and writing the prefix only")
      ->group(group);
  app.add_option("--p2p-etcd-password-file", p->etcd_password_file,
                 "The password of --p2p-etcd-user: a file of one line, mode 0600")
      ->group(group);
  app.add_option("--p2p-probe-interval", p->probe_interval_seconds,
                 "Seconds between the handshakes that keep each peer's state (ready, excluded, "
                 "unreachable) current; a peer whose connection closes is asked at once")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-probe-timeout", p->call_timeout_seconds,
                 "Seconds a handshake or probe may go unanswered before its peer is unreachable "
                 "(no lookup waits on it then)")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-etcd-ttl", p->etcd_ttl_seconds,
                 "Seconds of the etcd lease this server registers under (etcd:// peers): a "
                 "server that dies, or loses etcd for longer, leaves its peers' lists within it")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-lookup", p->lookup_mode,
                 "Which peers an L1 miss asks: directed (the peers this server's directory "
                 "names for the chunk, from the peers' chunk logs: one RPC per peer that may "
                 "hold it, none when no peer does; a peer whose log is not yet read is asked "
                 "for everything) or broadcast (every ready peer, every miss: the reference's "
                 "way)")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-directory-poll", p->directory_poll_seconds,
                 "Seconds between reads of each peer's chunk log (directed lookups): how long "
                 "a chunk stored on a peer may go unnamed here")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-chunk-log-size", p->chunk_log_chunks,
                 "Chunk ids this server's chunk log keeps for its peers' directories (8 bytes "
                 "each); a peer that falls further behind lists this server's L1 again")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-last-copy-bias", p->last_copy_bias,
                 "With directed lookups, eviction takes first the L1 objects whose chunks "
                 "another node keeps, and keeps the fleet's last copies longer: a last copy "
                 "outlives copies held elsewhere that were last used up to this fraction of "
                 "L1's object count uses after it (0: plain LRU)")
      ->capture_default_str()
      ->group(group);
  app.add_option("--p2p-transfer-engine", p->transfer_engine,
                 "How peers' memory is read: ucx (the reference's nixl, mooncake_te, verbs, cxl "
                 "and tcp are refused)")
      ->capture_default_str()
      ->group(group);
}

Status FinalizeP2p(ServerConfig* c) {
  P2pFlags& p = c->p2p;
  LMC_RETURN_IF_ERROR(CheckEngine(p.transfer_engine));
  if (!(p.lookup_timeout_seconds > 0) || p.lookup_timeout_seconds > 3600) {
    return InvalidConfig("--p2p-lookup-timeout must be in (0, 3600] seconds");
  }
  if (!(p.load_timeout_seconds > 0) || p.load_timeout_seconds > 3600) {
    return InvalidConfig("--p2p-load-timeout must be in (0, 3600] seconds");
  }
  if (!(p.probe_interval_seconds >= 0.1) || p.probe_interval_seconds > 3600) {
    return InvalidConfig("--p2p-probe-interval must be in [0.1, 3600] seconds");
  }
  if (!(p.call_timeout_seconds >= 0.1) || p.call_timeout_seconds > p.probe_interval_seconds) {
    return InvalidConfig("--p2p-probe-timeout must be in [0.1 s, --p2p-probe-interval]: a probe "
                         "still unanswered when the next is due would never let the peer's "
                         "state change");
  }
  if (p.lookup_mode != "directed" && p.lookup_mode != "broadcast") {
    return InvalidConfig("--p2p-lookup must be directed or broadcast, got '" + p.lookup_mode +
                         "'");
  }
  if (!(p.directory_poll_seconds >= 0.01) || p.directory_poll_seconds > 60) {
    return InvalidConfig("--p2p-directory-poll must be in [0.01, 60] seconds");
  }
  if (p.chunk_log_chunks < 4096 || p.chunk_log_chunks > (1ull << 28)) {
    return InvalidConfig("--p2p-chunk-log-size must be in [4096, 268435456] chunk ids (8 bytes "
                         "each)");
  }
  if (!(p.last_copy_bias >= 0) || p.last_copy_bias > 10) {
    return InvalidConfig("--p2p-last-copy-bias must be in [0, 10] (a fraction of L1's objects; "
                         "0 turns the bias off)");
  }
  if (!(p.etcd_ttl_seconds >= 2) || p.etcd_ttl_seconds > 300) {
    return InvalidConfig("--p2p-etcd-ttl must be in [2, 300] seconds");
  }
  p.etcd_ttl_ms = std::llround(p.etcd_ttl_seconds * 1000);
  p.directory_poll_ms = std::llround(p.directory_poll_seconds * 1000);
  p.probe_interval_ms = std::llround(p.probe_interval_seconds * 1000);
  p.call_timeout_ms = std::llround(p.call_timeout_seconds * 1000);
  c->service.p2p_lookup_timeout_ms =
      static_cast<TimeMs>(std::llround(p.lookup_timeout_seconds * 1000));
  p.lookup_timeout_ms = c->service.p2p_lookup_timeout_ms;
  p.load_timeout_ms = static_cast<TimeMs>(std::llround(p.load_timeout_seconds * 1000));
  c->service.p2p_serve_unauthenticated = p.allow_unauthenticated;
  c->service.p2p_max_locked_fraction = p.max_locked_fraction;
  LMC_RETURN_IF_ERROR(LoadEtcdPassword(&p));
  if (p.allow_unauthenticated) {
    c->notices.push_back(
        "--p2p-allow-unauthenticated: any client that reaches the main endpoint can lock "
        "objects and learn their addresses with p2p_lookup_and_lock (the reference's open "
        "behaviour)");
  }
  const auto p2p_entry = std::find_if(c->l2.adapters.begin(), c->l2.adapters.end(),
                                      [](const tier::L2AdapterSpec& s) { return s.type == "p2p"; });
  if (!p.enabled()) {
    if (!p.listen_url.empty() || !p.auth_key_file.empty() || !p.peers_list.empty()) {
      return InvalidConfig("--p2p-listen-url, --p2p-auth-key-file and --p2p-peers need "
                           "--p2p-advertise-url, which turns P2P on");
    }
    if (p2p_entry != c->l2.adapters.end()) {
      return InvalidConfig("--l2-adapter {\"type\": \"p2p\"} reads from the peers: turn P2P "
                           "on with --p2p-advertise-url, --p2p-auth-key-file and --p2p-peers");
    }
    return Status::Ok();
  }
  if (!p.peers_list.empty() && p2p_entry == c->l2.adapters.end()) {
    // The peers first: a chunk in a peer's L1 is nearer than one on a disk.
    LMC_ASSIGN_OR_RETURN(tier::L2AdapterSpec peers, tier::ParseL2AdapterSpec(R"({"type": "p2p"})", 0));
    c->l2.adapters.insert(c->l2.adapters.begin(), std::move(peers));
  }
  auto peers = fleet::ParsePeerSources(p.peers_list);
  if (!peers.ok()) return InvalidConfig("--p2p-peers: " + peers.status().message());
  p.peers = *std::move(peers);
  LMC_ASSIGN_OR_RETURN(const HostPort advertised,
                       ParseUrlFlag("--p2p-advertise-url", p.advertise_url));
  if (advertised.host == "0.0.0.0" || advertised.host == "::" || advertised.host == "*") {
    return InvalidConfig("--p2p-advertise-url '" + p.advertise_url +
                         "': peers cannot reach a wildcard address; advertise this node's "
                         "address and bind the wildcard with --p2p-listen-url");
  }
  LMC_ASSIGN_OR_RETURN(const HostPort listen,
                       ParseUrlFlag("--p2p-listen-url",
                                    p.listen_url.empty() ? p.advertise_url : p.listen_url));
  if (p.auth_key_file.empty()) {
    return InvalidConfig("P2P is on (--p2p-advertise-url) but no fleet key was given: write 32 "
                         "random bytes to a file (head -c 32 /dev/urandom > FILE; chmod 600 "
                         "FILE), copy it to every server of the fleet, and give "
                         "--p2p-auth-key-file FILE");
  }
  LMC_ASSIGN_OR_RETURN(fleet::FleetKey key, fleet::FleetKey::Load(p.auth_key_file));
  p.key = std::make_shared<const fleet::FleetKey>(std::move(key));
  if (p.key->looks_like_passphrase()) {
    c->notices.push_back("--p2p-auth-key-file " + p.auth_key_file +
                         " holds only printable text, like a passphrase: a guessable key lets "
                         "anyone who sees a handshake test guesses offline; write random bytes "
                         "instead (head -c 32 /dev/urandom > FILE) and copy it to every server");
  }
  p.fleet_endpoint = "tcp://" + listen.ToString();
  p.listen_host = listen.host;
  c->service.p2p_advertise_url = advertised.ToString();
  c->service.p2p_key_fingerprint = p.key->fingerprint();
  transport::FleetEndpointConfig& endpoint = c->router.fleet.emplace();
  endpoint.url = p.fleet_endpoint;
  endpoint.server_secret_z85 = p.key->server().secret_z85;
  endpoint.is_member = [key = p.key](std::span<const std::uint8_t> public_key) {
    return key->IsMemberKey(public_key);
  };
  endpoint.max_connections_per_source = p.max_connections_per_source;
  return Status::Ok();
}

}  // namespace lmcache::daemon
