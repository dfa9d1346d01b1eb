// Membership: the peers this server shares its cache with, and the state of
// each (issue 42, section 4): from `--p2p-peers` (fixed fleet endpoints,
// every address a DNS name resolves to, re-resolved, or the servers
// registered under an etcd prefix, etcd_registry.h), each met with the
// handshake (server_info over its fleet endpoint, fleet/peer_info.h) and
// connected over the UCX data channel.
//
// A peer is, in turn:
//   * connecting: no handshake answered yet;
//   * ready: compatible, its data channel connected;
//   * excluded: its chunk size, hashing or key differs from ours (one log
//     line, the reason in Peers()), or it is this server itself reached by
//     another address; it is asked again at every probe, so a peer that
//     is restarted with the right settings joins;
//   * unreachable: its last handshake or probe was not answered in time,
//     or its connection closed (the circuit breaker: a requester asks only
//     ready peers, so after one missed deadline, or once the connection to
//     a killed peer is gone, nothing waits on it); it is probed in the
//     background (at once after its connection closed, so a restarted peer
//     rejoins within a tick) and is ready again when it answers.
// Every peer is probed every probe interval: p2p_hello (who we are: our
// URL and boot id), then server_info. A new boot id is a new life: the data
// channel to the old one is closed and opened to the new one's descriptor,
// and Ready() hands requesters the new handles (our leases on it died with
// it). Its leases on us end on our side when its new life says hello and
// none of the old one's connections is open (server/p2p_ops.h), else at
// the owner's reaper and read TTL.
//
// Thread-safety: Tick runs on the membership's thread (Start) or a test's;
// Peers, Ready and Stats from any thread. The calls' completions run on the
// PeerRpc thread and only record what they learned, under `mu_`; Tick acts
// on it. Destroying the Membership stops its thread, then its PeerRpc
// (whose completions still find the Membership alive).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/periodic_thread.h"
#include "fleet/etcd_registry.h"
#include "fleet/peer_info.h"
#include "fleet/peer_rpc.h"
#include "fleet/peer_source.h"
#include "fleet/ucx_channel.h"

namespace lmcache::fleet {

enum class PeerState : std::uint8_t { kConnecting, kReady, kExcluded, kUnreachable };
const char* PeerStateName(PeerState state);

// One peer as /status shows it.
struct PeerView {
  std::string url;           // tcp://HOST:PORT of its fleet endpoint
  PeerState state = PeerState::kConnecting;
  std::string reason;        // why excluded or unreachable; empty otherwise
  // The models it cuts into other chunks than we do (ChunkAgreement::
  // Differences), whose keys are not asked of it; empty when none.
  std::string chunk_sizes_differ;
  std::string boot_id;       // of its current life, once a handshake answered
  std::uint64_t lives = 0;   // boot ids seen (1 after the first handshake)
  TimeMs last_answer_ms = -1;  // our clock's time of its last answer; -1: never
  // The round trip of its last answered handshake or probe, measured on the
  // steady clock (shown, never acted on); -1: never answered.
  double rtt_ms = -1;
  // What we loaded from it (FleetLink fills these in; docs/metrics.md has
  // the fleet-wide totals): bytes, batches of reads, batches that failed,
  // and the recent batches' throughput (a moving average, GB/s).
  std::uint64_t loaded_bytes = 0;
  std::uint64_t load_batches = 0;
  std::uint64_t load_failures = 0;
  double load_gbps = 0;
};

// A ready peer, for a requester: where to call it and read from it.
struct ReadyPeer {
  std::string url;
  PeerId rpc = 0;
  PeerHandle channel = 0;
  std::string boot_id;
  // Which models' keys it can hold (null: every model's, as ours).
  std::shared_ptr<const ChunkAgreement> chunks;
};

struct MembershipConfig {
  std::vector<PeerSource> sources;
  std::string self_url;     // tcp://HOST:PORT we advertise: never our own peer
  PeerInfo ours;            // our handshake (compatibility, and our boot id)
  TimeMs call_timeout_ms = 3'000;      // a handshake or probe unanswered this long: unreachable
  TimeMs probe_interval_ms = 5'000;    // each peer asked again this often
  TimeMs resolve_interval_ms = 5'000;  // dns:// names resolved again this often
  TimeMs etcd_ttl_ms = 10'000;         // etcd:// registrations' lease (etcd_registry.h)
  std::string etcd_user;               // etcd's own authentication ("" = none)
  std::string etcd_password;
  // At most this many peers (--p2p-max-peers): a source listing more (an
  // etcd prefix flooded with bogus entries) has the rest refused, counted
  // and logged; the peers already met keep their places.
  std::size_t max_peers = 256;
};


class Membership {
 public:
  // A name's addresses (IPv4 dotted, IPv6 without brackets); the system's
  // getaddrinfo by default, a fake in tests.
  using Resolver = std::function<Result<std::vector<std::string>>(const std::string& host)>;
  static Result<std::vector<std::string>> SystemResolve(const std::string& host);

  // `channel` and `clock` must outlive the membership; `key` proves us to peers.
  static Result<std::unique_ptr<Membership>> Create(MembershipConfig config, const FleetKey& key,
                                                    UcxChannel* channel, const Clock* clock,
                                                    Resolver resolver = SystemResolve);
  ~Membership();

  // Runs Tick every `period` on a thread of its own.
  void Start(std::chrono::milliseconds period = std::chrono::milliseconds(500));
  void Stop();
  // Stop, and every call to a peer in flight ends now (later ones at once):
  // at shutdown, so that no requester waits out a hung peer's deadline.
  void StopCalls();
  // One pass: resolves the names that are due, adds and drops peers, acts on
  // the answers that came in, and sends the handshakes and probes due.
  void Tick() LMC_EXCLUDES(mu_);

  std::vector<PeerView> Peers() const LMC_EXCLUDES(mu_);
  std::vector<ReadyPeer> Ready() const LMC_EXCLUDES(mu_);
  MembershipStats Stats() const LMC_EXCLUDES(mu_);
  // The etcd:// registrations, one per prefix (none without etcd:// entries).
  std::vector<EtcdView> Etcd() const;
  EtcdStats EtcdTotals() const;
  PeerRpc& rpc() { return *rpc_; }

 private:
  struct Peer {
    PeerView view;
    PeerId rpc = 0;
    std::optional<PeerHandle> channel;
    std::optional<std::string> channel_boot_id;  // the life `channel` reaches
    bool asking = false;        // a handshake or probe in flight
    std::chrono::steady_clock::time_point asked_at;  // when it was sent (its round trip)
    TimeMs next_ask_ms = 0;
    std::optional<Result<PeerInfo>> answer;  // came in, for Tick to act on
    std::shared_ptr<const ChunkAgreement> chunks;  // from its last handshake
  };

  Membership(MembershipConfig config, UcxChannel* channel, const Clock* clock, Resolver resolver);
  // The fleet endpoints the sources name now.
  std::vector<std::string> CurrentUrls() LMC_EXCLUDES(mu_);
  void Reconcile(const std::vector<std::string>& urls) LMC_REQUIRES(mu_);
  void Act(Peer& peer, Result<PeerInfo> answer) LMC_REQUIRES(mu_);
  void Admit(Peer& peer, const PeerInfo& info) LMC_REQUIRES(mu_);
  void SetState(Peer& peer, PeerState state, std::string reason) LMC_REQUIRES(mu_);
  void Ask(Peer& peer) LMC_REQUIRES(mu_);
  void CloseChannel(Peer& peer) LMC_REQUIRES(mu_);
  // The peer RPC saw peer `id`'s connection close: it leaves Ready at once
  // and is asked again at the next tick.
  void ConnectionClosed(PeerId id) LMC_EXCLUDES(mu_);

  const MembershipConfig config_;
  UcxChannel* const channel_;
  const Clock* const clock_;
  const Resolver resolver_;
  std::unique_ptr<PeerRpc> rpc_;

  mutable Mutex mu_;
  std::map<std::string, Peer> peers_ LMC_GUARDED_BY(mu_);  // by url
  std::map<std::string, std::vector<std::string>> resolved_ LMC_GUARDED_BY(mu_);  // dns host -> urls
  TimeMs next_resolve_ms_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t new_lives_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t resolve_failures_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t refused_peers_ LMC_GUARDED_BY(mu_) = 0;  // listed past max_peers, last Tick
  // One per etcd:// prefix; their own threads keep the lease and list the
  // prefix, Tick reads their last listings.
  std::vector<std::unique_ptr<EtcdRegistry>> etcd_;
  std::unique_ptr<PeriodicThread> thread_;
};

}  // namespace lmcache::fleet
