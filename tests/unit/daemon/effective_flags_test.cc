// EffectiveFlags: every flag of lmcache-server's real command line (AddFlags)
// with its value as given or its default, repeatable flags with every
// occurrence, and secrets masked.
#include "daemon/effective_flags.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "daemon/config.h"

namespace lmcache::daemon {
namespace {

std::vector<FlagValue> Parse(std::vector<std::string> args) {
  CLI::App app;
  ServerConfig config;
  AddFlags(app, &config);
  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector
  app.parse(args);
  return EffectiveFlags(app);
}

const FlagValue& Find(const std::vector<FlagValue>& flags, const std::string& name) {
  auto it = std::find_if(flags.begin(), flags.end(), [&](const FlagValue& f) { return f.name == name; });
  EXPECT_NE(it, flags.end()) << name;
  static const FlagValue kNone;
  return it == flags.end() ? kNone : *it;
}

TEST(EffectiveFlagsTest, GivenDefaultRepeatedAndMaskedValues) {
  const auto flags = Parse({"--url", "ipc:///run/a.sock", "--url", "tcp://127.0.0.1:5555",
                            "--chunk-size", "512", "--l2-adapter",
                            R"({"type":"resp","url":"redis://app:s3cret@10.0.0.5:6379"})"});
  const FlagValue& chunk = Find(flags, "--chunk-size");
  EXPECT_TRUE(chunk.given);
  EXPECT_EQ(chunk.values, std::vector<std::string>{"512"});
  const FlagValue& ratio = Find(flags, "--eviction-ratio");
  EXPECT_FALSE(ratio.given);
  EXPECT_EQ(ratio.values, std::vector<std::string>{"0.2"});
  const FlagValue& urls = Find(flags, "--url");
  EXPECT_TRUE(urls.repeatable);
  EXPECT_EQ(urls.values, (std::vector<std::string>{"ipc:///run/a.sock", "tcp://127.0.0.1:5555"}));
  const FlagValue& adapter = Find(flags, "--l2-adapter");
  ASSERT_EQ(adapter.values.size(), 1u);
  EXPECT_EQ(adapter.values[0], R"({"type":"resp","url":"redis://app:***@10.0.0.5:6379"})");
  for (const FlagValue& flag : flags) {
    EXPECT_NE(flag.name, "--help");
    for (const std::string& value : flag.values) EXPECT_EQ(value.find("s3cret"), std::string::npos);
  }
}

}  // namespace
}  // namespace lmcache::daemon
