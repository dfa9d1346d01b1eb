#include "daemon/endpoints.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace lmcache::daemon {
namespace {

Status Check(std::vector<NamedEndpoint> endpoints) { return RefuseSharedEndpoints(endpoints); }

TEST(Endpoints, OneIpcPathSpelledTwoWaysIsOneAddress) {
  const Status refused = Check({{"--url", "ipc:///tmp/x/../lmc.sock"}, {"--kv-events-url", "ipc:///tmp/lmc.sock"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), ErrorCode::kInvalidConfig);
  EXPECT_NE(refused.message().find("--url and --kv-events-url name the same address"),
            std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("the socket file /tmp/lmc.sock"), std::string::npos)
      << refused.message();
}

TEST(Endpoints, ARelativeIpcPathIsTheAbsoluteOneItNames) {
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_FALSE(Check({{"--url", "ipc://lmc.sock"}, {"--url", "ipc://" + cwd + "/lmc.sock"}}).ok());
}

TEST(Endpoints, TheTakeoverSocketIsAPathLikeAnIpcUrl) {
  EXPECT_FALSE(Check({{"--url", "ipc:///run/t.sock"}, {"--takeover-socket", "unix:/run/t.sock"}}).ok());
  EXPECT_TRUE(Check({{"--url", "ipc:///run/a.sock"}, {"--takeover-socket", "unix:/run/t.sock"}}).ok());
}

TEST(Endpoints, TcpPortsClashOnOneHostOrAWildcard) {
  const Status twice = Check({{"--url", "tcp://127.0.0.1:5555"}, {"--url", "tcp://localhost:5555"}});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("--url is given twice with the same address"), std::string::npos)
      << twice.message();
  EXPECT_NE(twice.message().find("tcp port 5555"), std::string::npos) << twice.message();
  for (const char* wildcard : {"*", "0.0.0.0", "[::]"}) {
    EXPECT_FALSE(Check({{"--url", "tcp://10.0.0.5:7000"},
                        {"--kv-events-url", std::string("tcp://") + wildcard + ":7000"}})
                     .ok())
        << wildcard;
  }
  EXPECT_TRUE(Check({{"--url", "tcp://10.0.0.5:7000"}, {"--kv-events-url", "tcp://10.0.0.6:7000"}}).ok());
  EXPECT_TRUE(Check({{"--url", "tcp://127.0.0.1:7000"}, {"--url", "tcp://127.0.0.1:7001"}}).ok());
  // IPv6 hosts keep their colons; the port is after the last one.
  EXPECT_FALSE(Check({{"--url", "tcp://[::1]:7000"}, {"--url", "tcp://[::1]:7000"}}).ok());
}

TEST(Endpoints, PortsTheKernelPicksClashWithNothing) {
  EXPECT_TRUE(Check({{"--url", "tcp://127.0.0.1:*"}, {"--kv-events-url", "tcp://127.0.0.1:*"},
                     {"--http-host/--http-port", "tcp://127.0.0.1:0"},
                     {"--kv-events-replay-url", "tcp://127.0.0.1:0"}})
                  .ok());
}

TEST(Endpoints, AnIpcPathAndATcpPortNeverClash) {
  EXPECT_TRUE(Check({{"--url", "ipc:///tmp/5555"}, {"--url", "tcp://127.0.0.1:5555"}}).ok());
}

}  // namespace
}  // namespace lmcache::daemon
