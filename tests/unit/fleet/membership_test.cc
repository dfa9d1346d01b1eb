// Membership: peers of --p2p-peers met with the handshake, against real
// servers in other processes. A compatible peer becomes ready with a data
// channel; one with another chunk size is excluded, saying so; one nobody
// answers for becomes unreachable at the call's deadline (and Ready() leaves
// it out); a restarted peer is a new life with a new channel; dns:// names
// follow their resolver (a fake one here), keep their last answer when it
// fails, and our own address is never a peer. Time is a fake clock.
#include "fleet/membership.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>

#include "fakes/fake_clock.h"
#include "fakes/free_port.h"
#include "fakes/server_process.h"
#include "fakes/temp_dir.h"
#include "fakes/wait_until.h"
#include "fleet/ucx_channel.h"

namespace lmcache::fleet {
namespace {

using testing::FakeClock;
using testing::ServerProcess;
using testing::TempDir;

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_file_ = (dir_.path() / "fleet.key").string();
    std::ofstream(key_file_) << std::string(32, 'm');
    chmod(key_file_.c_str(), 0600);
    key_ = std::make_unique<FleetKey>(*FleetKey::Load(key_file_));
    channel_ = std::move(UcxChannel::Create(pool_.data(), pool_.size(), &clock_,
                                            key_->data_key()))
                   .value();
  }

  std::unique_ptr<ServerProcess> StartPeer(int port, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{
        "--l1-size-gb", "0.05", "--url",
        "ipc://" + (dir_.path() / ("s" + std::to_string(servers_++) + ".sock")).string(),
        "--p2p-advertise-url", "127.0.0.1:" + std::to_string(port), "--p2p-auth-key-file",
        key_file_};
    args.insert(args.end(), extra.begin(), extra.end());
    auto server = std::make_unique<ServerProcess>(args);
    EXPECT_TRUE(server->WaitForLog("P2P on", std::chrono::seconds(60))) << server->Log();
    return server;
  }

  // Our own side: the handshake the peers are checked against.
  PeerInfo Ours() const {
    return {.boot_id = "this test",
            .chunk_size = 256,  // the server's default
            .hash_algorithm = "blake3",
            .none_hash = NoneHash(),
            .advertise_url = "127.0.0.1:1",
            .key_fingerprint = key_->fingerprint(),
            .data_channel = channel_->Descriptor()};
  }

  // BLAKE3 of 12 zero bytes, as b3sum computes it.
  static std::string NoneHash() {
    FILE* out = popen("head -c 12 /dev/zero | b3sum --no-names", "r");
    char hex[65] = {};
    EXPECT_EQ(fread(hex, 1, 64, out), 64u);
    pclose(out);
    std::string bytes;
    for (int i = 0; i < 64; i += 2) {
      bytes.push_back(static_cast<char>(std::stoi(std::string(hex + i, 2), nullptr, 16)));
    }
    return bytes;
  }

  std::unique_ptr<Membership> Make(std::vector<PeerSource> sources,
                                   Membership::Resolver resolver = Membership::SystemResolve,
                                   std::size_t max_peers = 256) {
    MembershipConfig config{.sources = std::move(sources),
                            .self_url = "tcp://127.0.0.1:1",
                            .ours = Ours(),
                            .call_timeout_ms = 3'000,
                            .probe_interval_ms = 5'000,
                            .resolve_interval_ms = 5'000,
                            .max_peers = max_peers};
    return std::move(Membership::Create(config, *key_, channel_.get(), &clock_, resolver)).value();
  }

  // Ticks until `done` holds for the peer at `url` (60 s of real time at most).
  static bool TickUntil(Membership& m, const std::string& url,
                        const std::function<bool(const PeerView&)>& done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < give_up) {
      m.Tick();
      for (const PeerView& p : m.Peers()) {
        if (p.url == url && done(p)) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  static PeerView Find(Membership& m, const std::string& url) {
    for (const PeerView& p : m.Peers()) {
      if (p.url == url) return p;
    }
    ADD_FAILURE() << url << " is not a peer";
    return {};
  }

  static PeerSource Tcp(int port) {
    return {PeerSourceKind::kTcp, "127.0.0.1", static_cast<std::uint16_t>(port), ""};
  }
  static std::string Url(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

  TempDir dir_{"lmc_membership"};
  std::string key_file_;
  std::unique_ptr<FleetKey> key_;
  FakeClock clock_;
  std::vector<std::byte> pool_ = std::vector<std::byte>(1 << 20);
  std::unique_ptr<UcxChannel> channel_;
  int servers_ = 0;
};

TEST_F(MembershipTest, ReadyExcludedAndUnreachablePeersEachSayWhy) {
  const std::vector<int> ports = testing::FreeTcpPorts(3);
  const int good = ports[0], odd = ports[1], dead = ports[2];
  auto good_server = StartPeer(good);
  auto odd_server = StartPeer(odd, {"--chunk-size", "512"});
  auto m = Make({Tcp(good), Tcp(odd), Tcp(dead), Tcp(1) /* our own address: skipped */});

  ASSERT_TRUE(TickUntil(*m, Url(good), [](const PeerView& p) {
    return p.state == PeerState::kReady;
  })) << good_server->Log();
  ASSERT_TRUE(TickUntil(*m, Url(odd), [](const PeerView& p) {
    return p.state == PeerState::kExcluded;
  }));
  EXPECT_NE(Find(*m, Url(odd)).reason.find("chunk size is 512 tokens, ours is 256 tokens"),
            std::string::npos)
      << Find(*m, Url(odd)).reason;
  EXPECT_EQ(m->Peers().size(), 3u);  // the own address is never met

  // Nobody answers for `dead`: connecting until the call's deadline, then unreachable.
  EXPECT_EQ(Find(*m, Url(dead)).state, PeerState::kConnecting);
  clock_.Advance(3'000);
  ASSERT_TRUE(TickUntil(*m, Url(dead), [](const PeerView& p) {
    return p.state == PeerState::kUnreachable;
  }));
  EXPECT_NE(Find(*m, Url(dead)).reason.find("no answer within 3000 ms"), std::string::npos);

  const std::vector<ReadyPeer> ready = m->Ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].url, Url(good));
  EXPECT_EQ(ready[0].boot_id, Find(*m, Url(good)).boot_id);
  const MembershipStats stats = m->Stats();
  EXPECT_EQ(stats.ready, 1u);
  EXPECT_EQ(stats.excluded, 1u);
  EXPECT_EQ(stats.unreachable, 1u);
  EXPECT_EQ(channel_->Stats().peers, 1u);  // only the ready peer has an endpoint
}

TEST_F(MembershipTest, ARestartedPeerIsANewLifeAndADeadOneLeavesReadyAtOnce) {
  const int port = testing::FreeTcpPort();
  auto server = StartPeer(port);
  auto m = Make({Tcp(port)});
  ASSERT_TRUE(TickUntil(*m, Url(port), [](const PeerView& p) {
    return p.state == PeerState::kReady;
  }));
  const std::string first_life = Find(*m, Url(port)).boot_id;
  const PeerHandle first_channel = m->Ready().at(0).channel;

  kill(server->pid(), SIGKILL);
  server->WaitExit(std::chrono::seconds(30));
  clock_.Advance(5'000);  // the next probe is due ...
  m->Tick();
  clock_.Advance(3'000);  // ... and unanswered at its deadline
  ASSERT_TRUE(TickUntil(*m, Url(port), [](const PeerView& p) {
    return p.state == PeerState::kUnreachable;
  }));
  EXPECT_TRUE(m->Ready().empty());  // the circuit is open: no requester waits on it
  // Its endpoint is closed: one that failed meanwhile is never read through again.
  EXPECT_TRUE(testing::WaitUntil([&] { return channel_->Stats().peers == 0; }));

  server = StartPeer(port);
  clock_.Advance(5'000);
  ASSERT_TRUE(TickUntil(*m, Url(port), [&](const PeerView& p) {
    return p.state == PeerState::kReady && p.boot_id != first_life;
  }));
  EXPECT_EQ(Find(*m, Url(port)).lives, 2u);
  EXPECT_EQ(m->Stats().new_lives, 1u);
  ASSERT_EQ(m->Ready().size(), 1u);
  EXPECT_NE(m->Ready()[0].channel, first_channel);  // a channel to the new life
}

// A peer killed between probes: its connection closes, and it leaves Ready
// at once (before, lookups kept asking it until a probe missed its deadline,
// up to a probe interval and a call timeout later, each waiting out its own
// deadline); it is asked again at once, so its restart rejoins without
// waiting for the next probe. The clock stands still: no probe or deadline
// is due here.
TEST_F(MembershipTest, APeerWhoseConnectionClosesLeavesReadyAtOnceAndRejoinsWithoutAProbe) {
  const int port = testing::FreeTcpPort();
  auto server = StartPeer(port);
  auto m = Make({Tcp(port)});
  ASSERT_TRUE(TickUntil(*m, Url(port), [](const PeerView& p) {
    return p.state == PeerState::kReady;
  }));
  const std::string first_life = Find(*m, Url(port)).boot_id;
  kill(server->pid(), SIGKILL);
  server->WaitExit(std::chrono::seconds(30));
  ASSERT_TRUE(TickUntil(*m, Url(port), [](const PeerView& p) {
    return p.state == PeerState::kUnreachable;
  }));
  EXPECT_TRUE(m->Ready().empty());
  server = StartPeer(port);
  ASSERT_TRUE(TickUntil(*m, Url(port), [&](const PeerView& p) {
    return p.state == PeerState::kReady && p.boot_id != first_life;
  }));
  EXPECT_EQ(m->Ready().size(), 1u);
}

TEST_F(MembershipTest, DnsNamesFollowTheirResolverAndKeepTheLastAnswerWhenItFails) {
  const int port = testing::FreeTcpPort();
  auto server = StartPeer(port);
  std::mutex mu;
  Result<std::vector<std::string>> answer = std::vector<std::string>{"127.0.0.1"};
  auto m = Make({{PeerSourceKind::kDns, "lmcache-fleet.test", static_cast<std::uint16_t>(port), ""}},
                [&](const std::string& host) {
                  EXPECT_EQ(host, "lmcache-fleet.test");
                  std::lock_guard lock(mu);
                  return answer;
                });
  ASSERT_TRUE(TickUntil(*m, Url(port), [](const PeerView& p) {
    return p.state == PeerState::kReady;
  }));
  {
    std::lock_guard lock(mu);
    answer = Status(ErrorCode::kUnavailable, "no DNS server");
  }
  clock_.Advance(5'000);
  m->Tick();
  EXPECT_EQ(m->Peers().size(), 1u) << "a failed resolution dropped the peer";
  EXPECT_EQ(m->Stats().resolve_failures, 1u);
  {
    std::lock_guard lock(mu);
    answer = std::vector<std::string>{"::1"};  // the name moved
  }
  clock_.Advance(5'000);
  m->Tick();
  ASSERT_EQ(m->Peers().size(), 1u);
  EXPECT_EQ(m->Peers()[0].url, "tcp://[::1]:" + std::to_string(port));
  EXPECT_TRUE(m->Ready().empty());
}

// A source listing more peers than --p2p-max-peers (a flooded etcd prefix,
// here a name resolving to 600 addresses) costs at most that many peers; the
// rest are refused and counted, and a place that frees is taken again
// (issue 62, section 6: 400 bogus entries kept a real member out, silently).
TEST_F(MembershipTest, PeersBeyondTheBoundAreRefusedCountedAndLaterAdmitted) {
  std::mutex mu;
  std::vector<std::string> addresses;
  for (int i = 0; i < 600; ++i) {
    addresses.push_back("10.255." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1));
  }
  auto m = Make({{PeerSourceKind::kDns, "flooded.test", 5556, ""}},
                [&](const std::string&) {
                  std::lock_guard lock(mu);
                  return Result<std::vector<std::string>>(addresses);
                },
                /*max_peers=*/8);
  m->Tick();
  EXPECT_EQ(m->Peers().size(), 8u);
  EXPECT_EQ(m->Stats().refused, 592u);
  {
    std::lock_guard lock(mu);
    addresses.resize(5);
  }
  clock_.Advance(5'000);
  m->Tick();
  EXPECT_EQ(m->Peers().size(), 5u);
  EXPECT_EQ(m->Stats().refused, 0u);
}

TEST_F(MembershipTest, AServerReachedAtAnotherAddressIsExcludedAsItself) {
  const int port = testing::FreeTcpPort();
  auto server = StartPeer(port);
  // Pretend to be that server: its own boot id, read from its handshake.
  auto probe = Make({Tcp(port)});
  ASSERT_TRUE(TickUntil(*probe, Url(port), [](const PeerView& p) { return !p.boot_id.empty(); }));
  MembershipConfig config{.sources = {Tcp(port)}, .self_url = "tcp://127.0.0.1:1", .ours = Ours()};
  config.ours.boot_id = Find(*probe, Url(port)).boot_id;
  auto self = std::move(Membership::Create(config, *key_, channel_.get(), &clock_)).value();
  ASSERT_TRUE(TickUntil(*self, Url(port), [](const PeerView& p) {
    return p.state == PeerState::kExcluded;
  }));
  EXPECT_NE(Find(*self, Url(port)).reason.find("this server itself"), std::string::npos);
}

}  // namespace
}  // namespace lmcache::fleet
