// Runs the real lmcache-server binary: startup, the pool segment, readiness,
// shutdown on SIGTERM/SIGINT, and the fail-fast paths.
#include <gtest/gtest.h>

#include "fakes/server_process.h"

namespace {

using lmcache::testing::ServerProcess;

void StartsServesAndCleansUpOn(int signal_number) {
  ServerProcess server({"--l1-size-gb", "1"});
  ASSERT_TRUE(server.WaitForLog("ready", std::chrono::seconds(60))) << server.Log();
  const std::string path = "/dev/shm/lmcache_l1_pool_" + std::to_string(server.pid());
  struct stat info {};
  ASSERT_EQ(stat(path.c_str(), &info), 0) << path;
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<std::uint64_t>(info.st_size), 1ull << 30);
  // It serves before the pool is pre-faulted; the prefaulter reports when it is done.
  EXPECT_TRUE(server.WaitForLog("pre-faulted", std::chrono::seconds(60))) << server.Log();
  EXPECT_NE(server.Log().find("GiB/s"), std::string::npos);
  ASSERT_EQ(kill(server.pid(), signal_number), 0);
  EXPECT_EQ(server.WaitExit(std::chrono::seconds(30)), 0) << server.Log();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ServerProcess, StartsWithOneGibPoolAndRemovesItOnSigterm) {
  StartsServesAndCleansUpOn(SIGTERM);
}

TEST(ServerProcess, RemovesItsPoolOnSigint) { StartsServesAndCleansUpOn(SIGINT); }

TEST(ServerProcess, OversizedPoolFailsFastNamingShmSize) {
  ServerProcess server({"--l1-size-gb", "100000"});
  // Failing fast means exiting at startup, naming the fix, instead of going
  // on to serve: the bound only keeps a regression from hanging the suite, so
  // it allows for a sanitizer build beside CPU-bound neighbours (WaitExit
  // returns as soon as the server exits).
  const int code = server.WaitExit(std::chrono::seconds(60));
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "still running after 60 s";
  const std::string log = server.Log();
  EXPECT_NE(log.find("--shm-size"), std::string::npos) << log;
  EXPECT_NE(log.find("GiB free"), std::string::npos) << log;
  EXPECT_NE(log.find("emptyDir"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/lmcache_l1_pool_" + std::to_string(server.pid())));
}

TEST(ServerProcess, InvalidFlagIsRefusedWithItsName) {
  ServerProcess server({"--l1-size-gb", "1", "--eviction-trigger-watermark", "1.5"});
  EXPECT_EQ(server.WaitExit(std::chrono::seconds(60)), 2);
  EXPECT_NE(server.Log().find("--eviction-trigger-watermark"), std::string::npos) << server.Log();
}

TEST(ServerProcess, RemovesSegmentOfACrashedServer) {
  ServerProcess crashed({"--l1-size-gb", "0.25"});
  ASSERT_TRUE(crashed.WaitForLog("ready", std::chrono::seconds(60))) << crashed.Log();
  const std::string stale = "/dev/shm/lmcache_l1_pool_" + std::to_string(crashed.pid());
  kill(crashed.pid(), SIGKILL);
  crashed.WaitExit(std::chrono::seconds(60));
  ASSERT_TRUE(std::filesystem::exists(stale));  // SIGKILL leaves it behind

  ServerProcess next({"--l1-size-gb", "0.25"});
  ASSERT_TRUE(next.WaitForLog("ready", std::chrono::seconds(60))) << next.Log();
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_NE(next.Log().find("removed stale segment"), std::string::npos) << next.Log();
  kill(next.pid(), SIGTERM);
  EXPECT_EQ(next.WaitExit(std::chrono::seconds(30)), 0);
}

TEST(ServerProcess, HelpDocumentsFlagsWithDefaults) {
  ServerProcess server({"--help"});
  EXPECT_EQ(server.WaitExit(std::chrono::seconds(60)), 0);
  const std::string log = server.Log();
  for (const char* flag : {"--l1-size-gb", "--shm-name", "--l1-align-bytes",
                           "--l1-write-ttl-seconds", "--l1-read-ttl-seconds", "--eviction-policy",
                           "--eviction-trigger-watermark", "--eviction-ratio", "--log-level"}) {
    EXPECT_NE(log.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(log.find("=600"), std::string::npos);
  EXPECT_NE(log.find("GiB"), std::string::npos);
}

}  // namespace
