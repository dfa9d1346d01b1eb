#include "daemon/command_line.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace lmcache::daemon {
namespace {

// The server's own command line: argv[0] then `args`.
std::optional<int> Configure(std::vector<std::string> args, ServerConfig* config) {
  args.insert(args.begin(), "lmcache-server");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  return ConfigureFromCommandLine(static_cast<int>(argv.size()), argv.data(), config);
}

TEST(CommandLine, AServableConfigurationStartsWithItsEffectiveFlags) {
  ServerConfig config;
  ASSERT_EQ(Configure({"--chunk-size", "512", "--log-level", "warn"}, &config), std::nullopt);
  EXPECT_EQ(config.chunk_size, 512);
  const auto chunk =
      std::find_if(config.effective_flags.begin(), config.effective_flags.end(),
                   [](const FlagValue& flag) { return flag.name == "--chunk-size"; });
  ASSERT_NE(chunk, config.effective_flags.end());
  EXPECT_TRUE(chunk->given);
  EXPECT_EQ(chunk->values, std::vector<std::string>{"512"});
}

TEST(CommandLine, VersionAnswersAndExitsZero) {
  ServerConfig config;
  EXPECT_EQ(Configure({"--version"}, &config), 0);
}

TEST(CommandLine, AnUnparsableCommandLineExitsNonZero) {
  ServerConfig config;
  const std::optional<int> exit_code = Configure({"--no-such-flag"}, &config);
  ASSERT_TRUE(exit_code.has_value());
  EXPECT_NE(*exit_code, 0);
}

TEST(CommandLine, AConfigurationTheServerRefusesExitsTwo) {
  ServerConfig config;
  EXPECT_EQ(Configure({"--allow-uids", "no-such-user-here", "--log-level", "off"}, &config), 2);
}

}  // namespace
}  // namespace lmcache::daemon
