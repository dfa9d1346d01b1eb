// InterfaceOfHost against this host's real interfaces: loopback is on "lo";
// an address no interface holds, and a name that does not resolve, are
// errors that say which.
#include "common/net_interfaces.h"

#include <gtest/gtest.h>

namespace lmcache {
namespace {

TEST(NetInterfacesTest, LoopbackIsOnLo) {
  Result<std::string> v4 = InterfaceOfHost("127.0.0.1");
  ASSERT_TRUE(v4.ok()) << v4.status().ToString();
  EXPECT_EQ(*v4, "lo");
  Result<std::string> v6 = InterfaceOfHost("::1");
  if (v6.ok()) EXPECT_EQ(*v6, "lo");  // where the host has IPv6 loopback
}

TEST(NetInterfacesTest, AnAddressNoInterfaceHoldsOrANameThatDoesNotResolveIsRefused) {
  // 198.51.100.0/24 is TEST-NET-2: documentation only, never assigned here.
  EXPECT_EQ(InterfaceOfHost("198.51.100.77").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(InterfaceOfHost("no-such-host.invalid").status().code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace lmcache
