#include "fleet/membership.h"

#include "common/logging.h"

#include <map>

#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>

#include "common/host_port.h"

namespace lmcache::fleet {

LMC_STATS_ROWS(MembershipStatRows, MembershipStats, LMC_MEMBERSHIP_STATS)

namespace {

std::string TcpUrl(const std::string& host, std::uint16_t port) {
  return "tcp://" + HostPort{host, port}.ToString();
}

}  // namespace

const char* PeerStateName(PeerState state) {
  switch (state) {
    case PeerState::kConnecting: return "connecting";
    case PeerState::kReady: return "ready";
    case PeerState::kExcluded: return "excluded";
    case PeerState::kUnreachable: return "unreachable";
  }
  return "unknown";
}

Result<std::vector<std::string>> Membership::SystemResolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
    return Status(ErrorCode::kUnavailable, "resolving " + host + ": " + gai_strerror(rc));
  }
  std::set<std::string> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) ==
        0) {
      addresses.insert(text);
    }
  }
  freeaddrinfo(found);
  return std::vector<std::string>(addresses.begin(), addresses.end());
}

Result<std::unique_ptr<Membership>> Membership::Create(MembershipConfig config,
                                                       const FleetKey& key, UcxChannel* channel,
                                                       const Clock* clock, Resolver resolver) {
  std::unique_ptr<Membership> m(
      new Membership(std::move(config), channel, clock, std::move(resolver)));
  Membership* raw = m.get();  // outlives its rpc_ (~Membership)
  LMC_ASSIGN_OR_RETURN(m->rpc_,
                       PeerRpc::Start(key, clock, [raw](PeerId id) { raw->ConnectionClosed(id); },
                                      m->config_.max_peers));
  // Entries naming one etcd prefix are one cluster's endpoints.
  std::map<std::string, EtcdConfig> clusters;
  for (const PeerSource& source : m->config_.sources) {
    if (source.kind != PeerSourceKind::kEtcd) continue;
    EtcdConfig& cluster = clusters[source.prefix];
    cluster.prefix = source.prefix;
    cluster.self_url = m->config_.self_url;
    cluster.ttl_ms = m->config_.etcd_ttl_ms;
    cluster.user = m->config_.etcd_user;
    cluster.password = m->config_.etcd_password;
    cluster.call_timeout_ms = std::min<TimeMs>(m->config_.call_timeout_ms, cluster.ttl_ms / 3);
    cluster.endpoints.push_back(HostPort{source.host, source.port}.ToString());  // v6 bracketed
  }
  for (auto& [prefix, cluster] : clusters) {
    LMC_ASSIGN_OR_RETURN(std::unique_ptr<EtcdRegistry> registry,
                         EtcdRegistry::Create(std::move(cluster), clock));
    m->etcd_.push_back(std::move(registry));
  }
  return m;
}

Membership::Membership(MembershipConfig config, UcxChannel* channel, const Clock* clock,
                       Resolver resolver)
    : config_(std::move(config)), channel_(channel), clock_(clock), resolver_(std::move(resolver)) {}

Membership::~Membership() {
  Stop();
  rpc_.reset();  // its last completions find this object whole
}

void Membership::Start(std::chrono::milliseconds period) {
  // Registered (or etcd's absence known) before the first tick lists peers.
  for (const auto& registry : etcd_) registry->Start();
  thread_ = std::make_unique<PeriodicThread>("p2p-members", period, [this] { Tick(); });
  thread_->Start();
}

void Membership::Stop() {
  if (thread_) thread_->Stop();
  for (const auto& registry : etcd_) registry->Stop();  // our keys revoked: peers drop us
}

std::vector<EtcdView> Membership::Etcd() const {
  std::vector<EtcdView> views;
  for (const auto& registry : etcd_) views.push_back(registry->View());
  return views;
}

EtcdStats Membership::EtcdTotals() const {
  EtcdStats total;
  for (const auto& registry : etcd_) {
    AddEtcdStats(&total, registry->Stats());
  }
  return total;
}

void Membership::StopCalls() {
  // Ticking first: a call made after the RPC stopped ends on its caller's
  // thread, and Tick makes its calls under mu_, which their completions take.
  Stop();
  rpc_->Stop();
}

std::vector<std::string> Membership::CurrentUrls() {
  bool resolve = false;
  {
    MutexLock lock(&mu_);
    resolve = clock_->NowMs() >= next_resolve_ms_;
    if (resolve) next_resolve_ms_ = clock_->NowMs() + config_.resolve_interval_ms;
  }
  std::set<std::string> urls;
  for (const PeerSource& source : config_.sources) {
    if (source.kind == PeerSourceKind::kTcp) {
      urls.insert(TcpUrl(source.host, source.port));
      continue;
    }
    if (source.kind != PeerSourceKind::kDns) continue;  // etcd: the registries' listings below
    const std::string name = source.ToString();
    if (resolve) {
      // Resolved outside the lock: getaddrinfo may wait on a DNS server.
      auto addresses = resolver_(source.host);
      MutexLock lock(&mu_);
      if (!addresses.ok()) {
        // The last answer stands: a DNS hiccup must not drop the fleet.
        ++resolve_failures_;
        spdlog::warn("p2p: {} did not resolve ({}); keeping its last {} peers", name,
                     addresses.status().message(), resolved_[name].size());
      } else {
        std::vector<std::string>& known = resolved_[name];
        known.clear();
        for (const std::string& a : *addresses) known.push_back(TcpUrl(a, source.port));
      }
    }
    MutexLock lock(&mu_);
    urls.insert(resolved_[name].begin(), resolved_[name].end());
  }
  for (const auto& registry : etcd_) {
    // The last listing: while etcd is out of reach it stands.
    for (std::string& url : registry->Urls()) urls.insert(std::move(url));
  }
  urls.erase(config_.self_url);
  return std::vector<std::string>(urls.begin(), urls.end());
}

void Membership::Reconcile(const std::vector<std::string>& urls) {
  // Those that left first, so that their places are free for the new.
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (std::binary_search(urls.begin(), urls.end(), it->first)) {
      ++it;
      continue;
    }
    spdlog::info("p2p: peer {} left the list", it->first);
    CloseChannel(it->second);
    rpc_->Disconnect(it->second.rpc);
    it = peers_.erase(it);
  }
  std::size_t beyond = 0;
  std::string first_beyond;
  for (const std::string& url : urls) {
    if (peers_.count(url) != 0) continue;
    if (peers_.size() >= config_.max_peers) {
      if (beyond++ == 0) first_beyond = url;
      continue;
    }
    Peer& peer = peers_[url];
    peer.view.url = url;
    peer.rpc = rpc_->Connect(url);
    spdlog::info("p2p: peer {} joined the list; meeting it", url);
  }
  refused_peers_ = beyond;
  if (beyond > 0) {
    static RateLimitedLog log(std::chrono::seconds(30));
    log.Warn("p2p: {} listed peers refused past --p2p-max-peers {} (the first: {}): raise it if "
             "the fleet is that large, or find out who writes to the peers' source (an etcd "
             "prefix open to others?)",
             beyond, config_.max_peers, first_beyond);
  }
}

void Membership::Tick() {
  const std::vector<std::string> urls = CurrentUrls();
  MutexLock lock(&mu_);
  Reconcile(urls);
  const TimeMs now = clock_->NowMs();
  for (auto& [url, peer] : peers_) {
    if (peer.answer) {
      Result<PeerInfo> answer = *std::move(peer.answer);
      peer.answer.reset();
      Act(peer, std::move(answer));
    }
    if (!peer.asking && now >= peer.next_ask_ms) Ask(peer);
  }
}

void Membership::Ask(Peer& peer) {
  peer.asking = true;
  peer.next_ask_ms = clock_->NowMs() + config_.probe_interval_ms;
  peer.asked_at = std::chrono::steady_clock::now();
  // Who we are, first, on the same connection: the peer then knows every
  // connection of ours as this life of ours (server/p2p_ops.h). Its answer
  // changes nothing (a reference server has no such operation).
  rpc_->Call(peer.rpc, Op::kP2pHello,
             {PeerHello{config_.ours.advertise_url, config_.ours.boot_id}.Encode()},
             clock_->NowMs() + config_.call_timeout_ms, [](Result<std::string>) {});
  // The completion runs on the RPC thread, never inside Call for this op.
  rpc_->Call(peer.rpc, Op::kServerInfo, {}, clock_->NowMs() + config_.call_timeout_ms,
             [this, url = peer.view.url, id = peer.rpc](Result<std::string> reply) {
               Result<PeerInfo> info = reply.ok() ? PeerInfo::FromServerInfo(*reply)
                                                  : Result<PeerInfo>(reply.status());
               MutexLock lock(&mu_);
               auto it = peers_.find(url);
               if (it == peers_.end() || it->second.rpc != id) return;  // left meanwhile
               it->second.asking = false;
               if (reply.ok()) {
                 const std::chrono::duration<double, std::milli> rtt =
                     std::chrono::steady_clock::now() - it->second.asked_at;
                 it->second.view.rtt_ms = rtt.count();
               }
               it->second.answer = std::move(info);
             });
}

void Membership::Act(Peer& peer, Result<PeerInfo> answer) {
  if (!answer.ok()) {
    // Its endpoint may have failed meanwhile (UCX does not read through a
    // failed one again): a peer that answers again gets a new one.
    CloseChannel(peer);
    const bool timed_out = answer.status().code() == ErrorCode::kTimeout;
    SetState(peer, PeerState::kUnreachable,
             timed_out ? "no answer within " + std::to_string(config_.call_timeout_ms) + " ms"
                       : answer.status().message());
    return;
  }
  peer.view.last_answer_ms = clock_->NowMs();
  const PeerInfo& info = *answer;
  if (info.boot_id == config_.ours.boot_id) {
    CloseChannel(peer);
    SetState(peer, PeerState::kExcluded, "this is this server itself (the same boot id)");
    return;
  }
  if (Status compatible = CheckCompatible(config_.ours, info); !compatible.ok()) {
    CloseChannel(peer);
    SetState(peer, PeerState::kExcluded, compatible.message());
    return;
  }
  Admit(peer, info);
}

void Membership::Admit(Peer& peer, const PeerInfo& info) {
  if (peer.view.boot_id != info.boot_id) {
    if (!peer.view.boot_id.empty()) {
      ++new_lives_;
      spdlog::info("p2p: peer {} restarted (boot id {} after {}); what we knew of its last "
                   "life is dropped",
                   peer.view.url, info.boot_id, peer.view.boot_id);
    }
    peer.view.boot_id = info.boot_id;
    peer.view.lives += 1;
  }
  if (peer.channel_boot_id != info.boot_id) {
    CloseChannel(peer);
    // Blocks until the channel's thread has made the endpoint (no peer
    // round trip: UCX connects lazily), under mu_: Peers() waits that long.
    auto handle = channel_->Connect(info.data_channel);
    if (!handle.ok()) {
      SetState(peer, PeerState::kUnreachable, "its data channel: " + handle.status().message());
      return;
    }
    peer.channel = *handle;
    peer.channel_boot_id = info.boot_id;
  }
  auto chunks = std::make_shared<ChunkAgreement>(
      ChunkAgreement{config_.ours.chunk_sizes(), info.chunk_sizes()});
  peer.view.chunk_sizes_differ = chunks->Differences();
  peer.chunks = peer.view.chunk_sizes_differ.empty() ? nullptr : std::move(chunks);
  SetState(peer, PeerState::kReady, "");
}

void Membership::SetState(Peer& peer, PeerState state, std::string reason) {
  if (peer.view.state == state && peer.view.reason == reason) return;
  // One line per change, not per probe.
  if (state == PeerState::kReady) {
    spdlog::info("p2p: peer {} is ready (boot id {})", peer.view.url, peer.view.boot_id);
  } else {
    spdlog::warn("p2p: peer {} is {}: {}", peer.view.url, PeerStateName(state), reason);
  }
  peer.view.state = state;
  peer.view.reason = std::move(reason);
  if (state != PeerState::kReady) {  // known again at its next handshake
    peer.view.chunk_sizes_differ.clear();
    peer.chunks.reset();
  }
}

void Membership::ConnectionClosed(PeerId id) {
  MutexLock lock(&mu_);
  for (auto& [url, peer] : peers_) {
    if (peer.rpc != id) continue;
    // Killed, restarted, or a network break: until it answers again no
    // lookup waits on it (a call queued to a closed connection waits for
    // its deadline), and it is asked at the next tick, not the next probe.
    // Only a ready peer: one that never answered (say, a CURVE handshake
    // refused over and over) keeps its probe schedule.
    if (peer.view.state != PeerState::kReady) return;
    peer.answer.reset();  // an answer from before the close says nothing of now
    SetState(peer, PeerState::kUnreachable,
             "its connection closed (killed, restarted or cut off); asked again now");
    peer.next_ask_ms = 0;
    return;
  }
}

void Membership::CloseChannel(Peer& peer) {
  if (peer.channel) channel_->Disconnect(*peer.channel);
  peer.channel.reset();
  peer.channel_boot_id.reset();
}

std::vector<PeerView> Membership::Peers() const {
  MutexLock lock(&mu_);
  std::vector<PeerView> out;
  for (const auto& [url, peer] : peers_) out.push_back(peer.view);
  return out;
}

std::vector<ReadyPeer> Membership::Ready() const {
  MutexLock lock(&mu_);
  std::vector<ReadyPeer> out;
  for (const auto& [url, peer] : peers_) {
    if (peer.view.state == PeerState::kReady && peer.channel) {
      out.push_back({url, peer.rpc, *peer.channel, peer.view.boot_id, peer.chunks});
    }
  }
  return out;
}

MembershipStats Membership::Stats() const {
  MutexLock lock(&mu_);
  MembershipStats s;
  for (const auto& [url, peer] : peers_) {
    switch (peer.view.state) {
      case PeerState::kConnecting: ++s.connecting; break;
      case PeerState::kReady: ++s.ready; break;
      case PeerState::kExcluded: ++s.excluded; break;
      case PeerState::kUnreachable: ++s.unreachable; break;
    }
  }
  s.new_lives = new_lives_;
  s.resolve_failures = resolve_failures_;
  s.refused = refused_peers_;
  return s;
}

}  // namespace lmcache::fleet
