// The P2P flags: off by default, on with an advertised address and a fleet
// key, and each refusal naming what to change.
#include "daemon/p2p_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <filesystem>
#include <fstream>

#include "daemon/config.h"
#include "fakes/parse_flags.h"
#include "fleet/fleet_key.h"

namespace lmcache::daemon {
namespace {

class P2pConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_file_ = (std::filesystem::temp_directory_path() /
                 ("lmc_p2p_key_" + std::to_string(::getpid())))
                    .string();
    std::ofstream(key_file_, std::ios::binary) << std::string(32, 'k');
    ::chmod(key_file_.c_str(), 0600);
  }
  void TearDown() override { std::filesystem::remove(key_file_); }

  static Result<ServerConfig> Parse(std::vector<std::string> args) {
    return testing::ParseServerFlags(std::move(args), 4242);
  }
  static std::string Refusal(std::vector<std::string> args) {
    auto config = Parse(std::move(args));
    EXPECT_FALSE(config.ok());
    return config.ok() ? "" : config.status().message();
  }

  std::string key_file_;
};

TEST_F(P2pConfigTest, OffByDefaultWithTheReferencesTimeout) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_FALSE(config->p2p.enabled());
  EXPECT_FALSE(config->router.fleet.has_value());
  EXPECT_EQ(config->service.p2p_lookup_timeout_ms, 30'000);
  EXPECT_FALSE(config->service.p2p_serve_unauthenticated);
  EXPECT_TRUE(config->p2p.keep_loaded);  // a peer's chunk stays as our own
}

TEST_F(P2pConfigTest, KeepLoadedTakesABooleanAndRefusesAnythingElse) {
  auto once = Parse({"--p2p-keep-loaded", "false"});
  ASSERT_TRUE(once.ok()) << once.status().ToString();
  EXPECT_FALSE(once->p2p.keep_loaded);
  Refusal({"--p2p-keep-loaded", "sometimes"});
}

TEST_F(P2pConfigTest, ProbesDefaultToFiveSecondsAndTheirTimeoutMustFitTheirInterval) {
  auto defaults = Parse({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->p2p.probe_interval_ms, 5'000);
  EXPECT_EQ(defaults->p2p.call_timeout_ms, 3'000);
  auto quick = Parse({"--p2p-probe-interval", "1", "--p2p-probe-timeout", "0.5"});
  ASSERT_TRUE(quick.ok()) << quick.status().ToString();
  EXPECT_EQ(quick->p2p.probe_interval_ms, 1'000);
  EXPECT_EQ(quick->p2p.call_timeout_ms, 500);
  EXPECT_NE(Refusal({"--p2p-probe-interval", "1"}).find("--p2p-probe-timeout"), std::string::npos);
  Refusal({"--p2p-probe-interval", "0"});
  Refusal({"--p2p-probe-interval", "nan"});
  Refusal({"--p2p-probe-timeout", "0"});
}

TEST_F(P2pConfigTest, LookupsAreDirectedByDefaultAndTheDirectoryFlagsAreChecked) {
  auto defaults = Parse({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_TRUE(defaults->p2p.directed());
  EXPECT_EQ(defaults->p2p.directory_poll_ms, 100);
  EXPECT_EQ(defaults->p2p.chunk_log_chunks, 1u << 20);
  auto broadcast = Parse({"--p2p-lookup", "broadcast", "--p2p-directory-poll", "0.5",
                          "--p2p-chunk-log-size", "4096"});
  ASSERT_TRUE(broadcast.ok()) << broadcast.status().ToString();
  EXPECT_FALSE(broadcast->p2p.directed());
  EXPECT_EQ(broadcast->p2p.directory_poll_ms, 500);
  EXPECT_EQ(broadcast->p2p.chunk_log_chunks, 4096u);
  EXPECT_NE(Refusal({"--p2p-lookup", "everyone"}).find("directed or broadcast"), std::string::npos);
  EXPECT_NE(Refusal({"--p2p-directory-poll", "0"}).find("--p2p-directory-poll"), std::string::npos);
  Refusal({"--p2p-directory-poll", "nan"});
  Refusal({"--p2p-directory-poll", "61"});
  EXPECT_NE(Refusal({"--p2p-chunk-log-size", "100"}).find("--p2p-chunk-log-size"),
            std::string::npos);
}

TEST_F(P2pConfigTest, TheLastCopyBiasIsOnByDefaultAndChecked) {
  auto defaults = Parse({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_DOUBLE_EQ(defaults->p2p.last_copy_bias, 4);
  auto off = Parse({"--p2p-last-copy-bias", "0"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_DOUBLE_EQ(off->p2p.last_copy_bias, 0);
  EXPECT_NE(Refusal({"--p2p-last-copy-bias", "-0.1"}).find("--p2p-last-copy-bias"),
            std::string::npos);
  Refusal({"--p2p-last-copy-bias", "nan"});
  Refusal({"--p2p-last-copy-bias", "11"});
}

TEST_F(P2pConfigTest, AnAdvertisedAddressAndAKeyOpenTheFleetEndpoint) {
  auto config = Parse({"--p2p-advertise-url", "10.0.0.2:5556", "--p2p-listen-url", "0.0.0.0:5556",
                       "--p2p-auth-key-file", key_file_, "--p2p-lookup-timeout", "2.5"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_TRUE(config->router.fleet.has_value());
  EXPECT_EQ(config->router.fleet->url, "tcp://0.0.0.0:5556");
  EXPECT_EQ(config->router.fleet->server_secret_z85, config->p2p.key->server().secret_z85);
  std::uint8_t member[32];
  ASSERT_NE(zmq_z85_decode(member, config->p2p.key->client().public_z85.c_str()), nullptr);
  EXPECT_TRUE(config->router.fleet->is_member(member));
  member[0] ^= 1;
  EXPECT_FALSE(config->router.fleet->is_member(member));
  EXPECT_EQ(config->service.p2p_lookup_timeout_ms, 2'500);
  EXPECT_EQ(config->service.p2p_advertise_url, "10.0.0.2:5556");
  EXPECT_EQ(config->service.p2p_key_fingerprint, config->p2p.key->fingerprint());
  // Without --p2p-listen-url the advertised address is bound.
  auto same = Parse({"--p2p-advertise-url", "10.0.0.2:5556", "--p2p-auth-key-file", key_file_});
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->router.fleet->url, "tcp://10.0.0.2:5556");
  EXPECT_TRUE(same->p2p.peers.empty());
  auto peers = Parse({"--p2p-advertise-url", "10.0.0.2:5556", "--p2p-auth-key-file", key_file_,
                      "--p2p-peers", "tcp://10.0.0.3:5556, dns://lmcache-fleet.default:5556"});
  ASSERT_TRUE(peers.ok()) << peers.status().ToString();
  ASSERT_EQ(peers->p2p.peers.size(), 2u);
  EXPECT_EQ(peers->p2p.peers[0].ToString(), "tcp://10.0.0.3:5556");
  EXPECT_EQ(peers->p2p.peers[1].kind, fleet::PeerSourceKind::kDns);
}

TEST_F(P2pConfigTest, PeersAreRefusedWithoutP2pOrWhenMalformed) {
  EXPECT_NE(Refusal({"--p2p-peers", "tcp://10.0.0.3:5556"}).find("--p2p-advertise-url"),
            std::string::npos);
  const std::vector<std::string> on{"--p2p-advertise-url", "10.0.0.2:5556",
                                    "--p2p-auth-key-file", key_file_, "--p2p-peers"};
  auto with = [&](const std::string& list) {
    std::vector<std::string> args = on;
    args.push_back(list);
    return Refusal(args);
  };
  EXPECT_NE(with("tcp://10.0.0.3").find("--p2p-peers"), std::string::npos);
  EXPECT_NE(with("http://10.0.0.3:5556").find("--p2p-peers"), std::string::npos);
  EXPECT_NE(with("etcd://10.0.0.9:2379").find("PREFIX"), std::string::npos);
}

TEST_F(P2pConfigTest, EtcdPeersAreTakenWithTheirTtlChecked) {
  auto config = Parse({"--p2p-advertise-url", "10.0.0.2:5556", "--p2p-auth-key-file", key_file_,
                       "--p2p-peers", "etcd://10.0.0.9:2379/lmcache,etcd://10.0.0.8:2379/lmcache",
                       "--p2p-etcd-ttl", "4"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->p2p.peers.size(), 2u);
  EXPECT_EQ(config->p2p.peers[0].kind, fleet::PeerSourceKind::kEtcd);
  EXPECT_EQ(config->p2p.peers[1].prefix, "/lmcache");
  EXPECT_EQ(config->p2p.etcd_ttl_ms, 4'000);
  EXPECT_EQ(Parse({}).value().p2p.etcd_ttl_ms, 10'000);
  EXPECT_NE(Refusal({"--p2p-etcd-ttl", "1"}).find("--p2p-etcd-ttl"), std::string::npos);
  Refusal({"--p2p-etcd-ttl", "301"});
}

TEST_F(P2pConfigTest, RefusalsNameWhatToChange) {
  EXPECT_NE(Refusal({"--p2p-advertise-url", "10.0.0.2:5556"}).find("--p2p-auth-key-file FILE"),
            std::string::npos);
  EXPECT_NE(Refusal({"--p2p-advertise-url", "0.0.0.0:5556", "--p2p-auth-key-file", key_file_})
                .find("--p2p-listen-url"),
            std::string::npos);
  EXPECT_NE(Refusal({"--p2p-advertise-url", "10.0.0.2", "--p2p-auth-key-file", key_file_})
                .find("HOST:PORT"),
            std::string::npos);
  EXPECT_NE(Refusal({"--p2p-auth-key-file", key_file_}).find("--p2p-advertise-url"),
            std::string::npos);
  for (const char* engine : {"nixl", "mooncake_te", "verbs", "cxl", "tcp"}) {
    const std::string why = Refusal({"--p2p-transfer-engine", engine});
    EXPECT_NE(why.find("--p2p-transfer-engine ucx"), std::string::npos) << why;
  }
  EXPECT_NE(Refusal({"--p2p-transfer-engine", "carrier-pigeon"}).find("give ucx"),
            std::string::npos);
  Refusal({"--p2p-lookup-timeout", "0"});
  Refusal({"--p2p-lookup-timeout", "nan"});
  ::chmod(key_file_.c_str(), 0644);
  EXPECT_NE(Refusal({"--p2p-advertise-url", "10.0.0.2:5556", "--p2p-auth-key-file", key_file_})
                .find("chmod"),
            std::string::npos);
  // The fleet endpoint may not share an address with another endpoint.
  ::chmod(key_file_.c_str(), 0600);
  Refusal({"--port", "5556", "--host", "127.0.0.1", "--p2p-advertise-url", "127.0.0.1:5556",
           "--p2p-auth-key-file", key_file_});
}

// With peers listed, the peers are the first source of the L2 cascade
// unless the operator placed {"type": "p2p"} elsewhere; without P2P such an
// entry is refused; the requester's deadlines are the reference's flags.
TEST_F(P2pConfigTest, PeersComeFirstInTheCascadeUnlessPlacedAndNeedP2p) {
  const std::vector<std::string> on{"--p2p-advertise-url", "10.0.0.2:5556", "--p2p-auth-key-file",
                                    key_file_, "--p2p-peers", "tcp://10.0.0.3:5556"};
  auto args = on;
  args.insert(args.end(), {"--l2-adapter", R"({"type": "mock"})", "--p2p-load-timeout", "1.5"});
  auto first = Parse(args);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->l2.adapters.size(), 2u);
  EXPECT_EQ(first->l2.adapters[0].type, "p2p");
  EXPECT_EQ(first->l2.adapters[1].type, "mock");
  EXPECT_EQ(first->p2p.load_timeout_ms, 1'500);
  EXPECT_EQ(first->p2p.lookup_timeout_ms, 30'000);

  args = on;
  args.insert(args.end(), {"--l2-adapter", R"({"type": "mock"})", "--l2-adapter", R"({"type": "p2p"})"});
  auto placed = Parse(args);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  ASSERT_EQ(placed->l2.adapters.size(), 2u);
  EXPECT_EQ(placed->l2.adapters[1].type, "p2p");

  // No peers listed: nothing to ask, no adapter added.
  auto alone = Parse({"--p2p-advertise-url", "10.0.0.2:5556", "--p2p-auth-key-file", key_file_});
  ASSERT_TRUE(alone.ok());
  EXPECT_TRUE(alone->l2.adapters.empty());

  EXPECT_NE(Refusal({"--l2-adapter", R"({"type": "p2p"})"}).find("--p2p-advertise-url"),
            std::string::npos);
  args = on;
  args.insert(args.end(), {"--p2p-load-timeout", "0"});
  EXPECT_NE(Refusal(args).find("--p2p-load-timeout"), std::string::npos);
}

TEST_F(P2pConfigTest, AllowingUnauthenticatedPeersIsAnnounced) {
  auto config = Parse({"--p2p-allow-unauthenticated"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(config->service.p2p_serve_unauthenticated);
  ASSERT_FALSE(config->notices.empty());
  EXPECT_NE(config->notices.back().find("--p2p-allow-unauthenticated"), std::string::npos);
}

// etcd's own authentication: a user needs its password file, the file must
// be closed to others, and its first line is the password.
TEST_F(P2pConfigTest, EtcdCredentialsGoTogetherAndTheirFileIsChecked) {
  const std::vector<std::string> base = {"--p2p-advertise-url", "10.0.0.2:5556",
                                         "--p2p-auth-key-file", key_file_};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return Parse(args);
  };
  EXPECT_FALSE(with({"--p2p-etcd-user", "fleet"}).ok());
  const std::string password = key_file_ + ".etcd";
  std::ofstream(password) << "s3cret\nignored\n";
  ::chmod(password.c_str(), 0644);
  auto open_file = with({"--p2p-etcd-user", "fleet", "--p2p-etcd-password-file", password});
  ASSERT_FALSE(open_file.ok());
  EXPECT_NE(open_file.status().message().find("chmod 600"), std::string::npos);
  ::chmod(password.c_str(), 0600);
  auto good = with({"--p2p-etcd-user", "fleet", "--p2p-etcd-password-file", password});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->p2p.etcd_password, "s3cret");
  std::filesystem::remove(password);
}

// A key of printable text (the fixture's: 32 'k's) is a passphrase: the
// server starts, and says why it should not be used (issue 62, section 8);
// 32 random bytes are not announced.
TEST_F(P2pConfigTest, APassphraseForAKeyIsAnnounced) {
  auto config = Parse({"--p2p-advertise-url", "10.0.0.2:5556", "--p2p-auth-key-file", key_file_});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_FALSE(config->notices.empty());
  EXPECT_NE(config->notices.back().find("passphrase"), std::string::npos);
  std::string random(32, '\0');
  for (std::size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>(i * 37 + 1);
  std::ofstream(key_file_, std::ios::binary | std::ios::trunc) << random;
  auto strong = Parse({"--p2p-advertise-url", "10.0.0.2:5556", "--p2p-auth-key-file", key_file_});
  ASSERT_TRUE(strong.ok()) << strong.status().ToString();
  for (const std::string& notice : strong->notices) {
    EXPECT_EQ(notice.find("passphrase"), std::string::npos) << notice;
  }
}

}  // namespace
}  // namespace lmcache::daemon
