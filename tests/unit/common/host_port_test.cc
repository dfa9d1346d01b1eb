// ParseHostPort: the host:port forms of URLs and flags, and what is refused.
#include "common/host_port.h"

#include <gtest/gtest.h>

namespace lmcache {
namespace {

TEST(HostPortTest, SplitsNamesAddressesAndBracketedIpv6) {
  EXPECT_EQ(ParseHostPort("node-1.example:7000").value(), (HostPort{"node-1.example", 7000}));
  EXPECT_EQ(ParseHostPort("10.0.0.2:1").value(), (HostPort{"10.0.0.2", 1}));
  EXPECT_EQ(ParseHostPort("[fd00::3]:65535").value(), (HostPort{"fd00::3", 65535}));
  EXPECT_EQ(ParseHostPort("[fd00::3]:65535")->ToString(), "[fd00::3]:65535");
  EXPECT_EQ(ParseHostPort("a:9")->ToString(), "a:9");
}

TEST(HostPortTest, ADefaultPortAppliesOnlyWhenNoneIsWritten) {
  EXPECT_EQ(ParseHostPort("redis", 6379).value(), (HostPort{"redis", 6379}));
  EXPECT_EQ(ParseHostPort("[::1]", 6379).value(), (HostPort{"::1", 6379}));
  EXPECT_EQ(ParseHostPort("redis:7001", 6379).value(), (HostPort{"redis", 7001}));
  auto required = ParseHostPort("redis");
  ASSERT_FALSE(required.ok());
  EXPECT_NE(required.status().message().find("HOST:PORT"), std::string::npos);
}

TEST(HostPortTest, RefusesBadPortsEmptyHostsAndOpenBrackets) {
  for (const char* text :
       {"a:0", "a:65536", "a:", "a:x", "a:1x", "a:-1", ":80", "", "[::1", "[::1]x", "[]:80"}) {
    auto parsed = ParseHostPort(text, 6379);
    EXPECT_FALSE(parsed.ok()) << text;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalidArgument) << text;
    }
  }
  EXPECT_NE(ParseHostPort("a:99999").status().message().find("1..65535"), std::string::npos);
}

}  // namespace
}  // namespace lmcache
