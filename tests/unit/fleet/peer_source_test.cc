// ParsePeerSources: the forms of --p2p-peers an operator writes, and the
// refusals, each naming the entry and what to change.
#include "fleet/peer_source.h"

#include <gtest/gtest.h>

namespace lmcache::fleet {
namespace {

std::string Refusal(std::string_view list) {
  auto parsed = ParsePeerSources(list);
  EXPECT_FALSE(parsed.ok()) << list;
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(PeerSourceTest, AnEmptyListMeansNoPeers) {
  auto parsed = ParsePeerSources("  ");
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->empty());
}

TEST(PeerSourceTest, ParsesEachKindInOrder) {
  auto parsed = ParsePeerSources(
      "tcp://10.0.0.2:5555, dns://lmcache-peers.default.svc.cluster.local:5555,"
      "etcd://etcd-0:2379/lmcache/fleet-a,tcp://[fd00::3]:6000");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 4u);
  EXPECT_EQ((*parsed)[0], (PeerSource{PeerSourceKind::kTcp, "10.0.0.2", 5555, ""}));
  EXPECT_EQ((*parsed)[1], (PeerSource{PeerSourceKind::kDns,
                                      "lmcache-peers.default.svc.cluster.local", 5555, ""}));
  EXPECT_EQ((*parsed)[2], (PeerSource{PeerSourceKind::kEtcd, "etcd-0", 2379, "/lmcache/fleet-a"}));
  EXPECT_EQ((*parsed)[3], (PeerSource{PeerSourceKind::kTcp, "fd00::3", 6000, ""}));
  EXPECT_EQ((*parsed)[3].ToString(), "tcp://[fd00::3]:6000");
  EXPECT_EQ((*parsed)[2].ToString(), "etcd://etcd-0:2379/lmcache/fleet-a");
}

TEST(PeerSourceTest, RefusesAnUnknownSchemeNamingTheForms) {
  const std::string why = Refusal("nixl://10.0.0.2:5555");
  EXPECT_NE(why.find("'nixl://10.0.0.2:5555'"), std::string::npos) << why;
  EXPECT_NE(why.find("tcp://HOST:PORT"), std::string::npos) << why;
  Refusal("10.0.0.2:5555");
}

TEST(PeerSourceTest, RefusesBadPorts) {
  for (const char* list : {"tcp://a:0", "tcp://a:65536", "tcp://a:", "tcp://a", "tcp://a:55x",
                           "tcp://a:-1", "tcp://[fd00::3]6000"}) {
    Refusal(list);
  }
  EXPECT_NE(Refusal("tcp://a:99999").find("1..65535"), std::string::npos);
}

TEST(PeerSourceTest, RefusesHostsThatAreNeitherNamesNorAddresses) {
  for (const char* list :
       {"tcp://:5555", "tcp://under_score:1", "tcp://-lead:1", "tcp://trail-:1", "tcp://a..b:1",
        "tcp://fd00::3:6000", "tcp://[nothex]:1", "tcp://a b:1"}) {
    Refusal(list);
  }
  EXPECT_NE(Refusal("tcp://fd00::3:6000").find("brackets"), std::string::npos);
  EXPECT_TRUE(ParsePeerSources("tcp://" + std::string(63, 'a') + ":1").ok());
  Refusal("tcp://" + std::string(64, 'a') + ":1");
}

TEST(PeerSourceTest, APathBelongsToEtcdOnlyAndEtcdNeedsOne) {
  EXPECT_NE(Refusal("tcp://a:1/x").find("no path"), std::string::npos);
  Refusal("dns://a:1/x");
  EXPECT_NE(Refusal("etcd://a:2379").find("PREFIX"), std::string::npos);
  Refusal("etcd://a:2379/");
}

TEST(PeerSourceTest, DnsNeedsANameAndNoEntryComesTwiceOrEmpty) {
  EXPECT_NE(Refusal("dns://10.0.0.2:1").find("tcp://"), std::string::npos);
  Refusal("dns://[fd00::3]:1");
  EXPECT_NE(Refusal("tcp://a:1, tcp://a:1").find("twice"), std::string::npos);
  EXPECT_TRUE(ParsePeerSources("tcp://a:1,dns://a:1").ok());  // another kind: another source
  EXPECT_NE(Refusal("tcp://a:1,,tcp://b:1").find("extra comma"), std::string::npos);
  Refusal("tcp://a:1,");
}

}  // namespace
}  // namespace lmcache::fleet
