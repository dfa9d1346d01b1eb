// EtcdRegistry without an etcd (test_p2p_etcd.py runs it against real
// ones): the gateway's encodings (base64 both ways, a prefix's range end),
// and an etcd nobody answers for: every endpoint tried, the failure
// counted and shown, no peer listed, nothing registered.
#include "fleet/etcd_registry.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "fakes/fake_clock.h"

namespace lmcache::fleet {
namespace {

// A loopback port nobody listens on (bound, then closed).
int ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

TEST(EtcdRegistry, TheGatewaysEncodingsReadBack) {
  for (const std::string& text : std::vector<std::string>{
           "", "a", "ab", "abc", "/lmcache/tcp://10.0.0.1:5556", std::string("\0\xff\x10", 3)}) {
    const std::string encoded = EtcdRegistry::Base64(text);
    EXPECT_EQ(encoded.size() % 4, 0u);
    auto decoded = EtcdRegistry::FromBase64(encoded);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, text);
  }
  EXPECT_EQ(EtcdRegistry::Base64("fleet/a"), "ZmxlZXQvYQ==");  // what etcd's gateway wrote back
  EXPECT_FALSE(EtcdRegistry::FromBase64("abc").ok());
  EXPECT_FALSE(EtcdRegistry::FromBase64("a*c=").ok());
  EXPECT_EQ(EtcdRegistry::RangeEnd("/lmcache/"), "/lmcache0");
  EXPECT_EQ(EtcdRegistry::RangeEnd(std::string("a\xff", 2)), "b");
}

TEST(EtcdRegistry, AnEtcdNobodyAnswersForIsCountedAndListsNobody) {
  testing::FakeClock clock;
  EtcdConfig config;
  config.endpoints = {"127.0.0.1:" + std::to_string(ClosedPort()),
                      "127.0.0.1:" + std::to_string(ClosedPort())};
  config.prefix = "/lmcache";
  config.self_url = "tcp://127.0.0.1:5556";
  config.call_timeout_ms = 500;
  auto registry = EtcdRegistry::Create(config, &clock);
  ASSERT_TRUE(registry.ok()) << registry.status().ToString();
  (*registry)->Tick();
  const EtcdView view = (*registry)->View();
  EXPECT_FALSE(view.reachable);
  EXPECT_FALSE(view.registered);
  EXPECT_NE(view.last_error.find("/v3/lease/grant"), std::string::npos) << view.last_error;
  EXPECT_TRUE((*registry)->Urls().empty());
  const EtcdStats stats = (*registry)->Stats();
  EXPECT_EQ(stats.failures, 1u);  // one call, both endpoints tried
  EXPECT_EQ(stats.lease_grants, 0u);
  EXPECT_FALSE(EtcdRegistry::Create({}, &clock).ok());
}

}  // namespace
}  // namespace lmcache::fleet
