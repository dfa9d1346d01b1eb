// Regression of issue 7 finding 3: a second lmcache-server started with the
// same --shm-name and endpoint must be refused (naming the running server's
// pid) and must leave the running server's pool and socket untouched.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "fakes/server_process.h"
#include "lmcache/client.h"

namespace {

using lmcache::testing::ServerProcess;
using std::chrono::seconds;

// Registers, stores one chunk and reads it back through the running server.
void ExpectServes(const std::string& url) {
  lmcache::client::ClientOptions options;
  options.url = url;
  options.request_timeout = std::chrono::milliseconds(10000);
  options.prefault_pool = false;
  auto client = std::move(lmcache::client::Client::Connect(options)).value();
  auto registered = client->Register({.instance_id = 77, .model_name = "dup", .world_size = 1,
                                      .num_layers = 1, .hidden_dim_size = 8});
  ASSERT_TRUE(registered.ok()) << registered.status().ToString();
  lmcache::client::KeySpec key;
  key.model_name = "dup";
  key.token_ids.assign(256, 7);
  key.end = 256;
  key.request_id = "dup";
  std::vector<std::byte> chunk(client->ObjectBytes(), std::byte{0x5c});
  std::vector<std::span<const std::byte>> chunks{chunk};
  auto stored = client->Store(key, chunks);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  auto hits = client->Lookup(key);
  ASSERT_TRUE(hits.ok()) << hits.status().ToString();
  EXPECT_EQ(*hits, 1u);
  std::vector<std::byte> out(client->ObjectBytes());
  std::vector<std::span<std::byte>> outs{out};
  ASSERT_TRUE(client->Retrieve(key, outs).ok());
  EXPECT_EQ(out, chunk);
}

void DuplicateIsRefused(const std::string& url) {
  const std::string name = "lmcache_l1_pool_dup_test_" + std::to_string(getpid());
  ServerProcess first({"--l1-size-gb", "0.125", "--shm-name", name, "--url", url});
  ASSERT_TRUE(first.WaitForLog("ready", seconds(60))) << first.Log();

  ServerProcess second({"--l1-size-gb", "0.125", "--shm-name", name, "--url", url});
  const int code = second.WaitExit(seconds(20));
  EXPECT_NE(code, 0) << second.Log();
  EXPECT_NE(code, -1) << "the duplicate is still running: " << second.Log();
  EXPECT_NE(second.Log().find(std::to_string(first.pid())), std::string::npos)
      << "the refusal does not name the running server's pid: " << second.Log();

  EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + name));
  ExpectServes(url);
  kill(first.pid(), SIGTERM);
  EXPECT_EQ(first.WaitExit(seconds(30)), 0) << first.Log();
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name));
}

TEST(Issue7DuplicateStart, OverTcpTheRunningServerKeepsItsPool) {
  DuplicateIsRefused("tcp://127.0.0.1:" + std::to_string(20000 + getpid() % 20000));
}

TEST(Issue7DuplicateStart, OverIpcTheRunningServerKeepsItsSocketAndPool) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("lmcache_dup_" + std::to_string(getpid()) + ".sock");
  DuplicateIsRefused("ipc://" + path);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
