#include "server/config.h"

#include <gtest/gtest.h>

namespace lmcache::server {
namespace {

Result<ServerConfig> Parse(std::vector<std::string> args) {
  CLI::App app;
  ServerConfig config;
  AddFlags(app, &config);
  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return InvalidConfig(e.what());
  }
  LMC_RETURN_IF_ERROR(Finalize(&config, 4242));
  return config;
}

TEST(ServerConfig, DefaultsMatchTheReference) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->l1.shm_name, "lmcache_l1_pool_4242");
  EXPECT_EQ(config->l1.table.write_ttl_ms, 600'000);
  EXPECT_EQ(config->l1.table.read_ttl_ms, 300'000);
  EXPECT_EQ(config->l1.evictor.trigger_watermark, 0.8);
  EXPECT_EQ(config->l1.evictor.eviction_ratio, 0.2);
  EXPECT_EQ(config->l1.allocator.align_bytes, 4096u);
  EXPECT_TRUE(config->l1.table.on_demand_eviction);
  EXPECT_EQ(config->l1.size_bytes, static_cast<std::uint64_t>(DefaultL1SizeGb()) << 30);
  EXPECT_GE(DefaultL1SizeGb(), 1.0);
}

TEST(ServerConfig, FlagsAreApplied) {
  auto config = Parse({"--l1-size-gb", "1.5", "--shm-name", "/pool", "--l1-write-ttl-seconds",
                       "30", "--eviction-policy", "noop", "--no-on-demand-eviction",
                       "--l1-align-bytes", "65536"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->l1.size_bytes, 3ull << 29);
  EXPECT_EQ(config->l1.shm_name, "lmcache_l1_pool_pool");
  EXPECT_EQ(config->l1.table.write_ttl_ms, 30'000);
  EXPECT_EQ(config->l1.eviction_policy, "noop");
  EXPECT_FALSE(config->l1.table.on_demand_eviction);
  EXPECT_EQ(config->l1.allocator.align_bytes, 65536u);
}

void ExpectRejected(std::vector<std::string> args, const std::string& flag) {
  auto config = Parse(args);
  ASSERT_FALSE(config.ok()) << "accepted: " << args[0];
  EXPECT_NE(config.status().message().find(flag), std::string::npos)
      << config.status().message();
}

TEST(ServerConfig, InvalidValuesNameTheFlag) {
  ExpectRejected({"--eviction-trigger-watermark", "0"}, "--eviction-trigger-watermark");
  ExpectRejected({"--eviction-trigger-watermark", "1.01"}, "--eviction-trigger-watermark");
  ExpectRejected({"--eviction-ratio", "0"}, "--eviction-ratio");
  ExpectRejected({"--l1-read-ttl-seconds", "0"}, "--l1-read-ttl-seconds");
  ExpectRejected({"--l1-write-ttl-seconds", "-5"}, "--l1-write-ttl-seconds");
  ExpectRejected({"--eviction-policy", "ARC"}, "--eviction-policy");
  ExpectRejected({"--l1-align-bytes", "1000"}, "--l1-align-bytes");
  ExpectRejected({"--l1-size-gb", "-1"}, "--l1-size-gb");
  ExpectRejected({"--shm-name", "a/b"}, "--shm-name");
  ExpectRejected({"--log-level", "loud"}, "--log-level");
  ExpectRejected({"--eviction-interval-ms", "0"}, "--eviction-interval-ms");
}

}  // namespace
}  // namespace lmcache::server
