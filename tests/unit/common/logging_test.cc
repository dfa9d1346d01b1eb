// Logging: level names, and RateLimitedLog writing one line per interval with
// the count of what it suppressed.
#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include "fakes/fake_clock.h"

namespace lmcache {
namespace {

TEST(Logging, KnowsTheLevelNames) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "critical", "off", "INFO"}) {
    EXPECT_TRUE(IsValidLogLevel(level)) << level;
  }
  EXPECT_FALSE(IsValidLogLevel("loud"));
}

TEST(RateLimitedLog, AllowsOneLinePerIntervalAndCountsTheRest) {
  testing::FakeClock clock;
  RateLimitedLog log(std::chrono::seconds(10), &clock);
  std::uint64_t suppressed = 99;
  EXPECT_TRUE(log.Allow(&suppressed));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(log.Allow(&suppressed));
  clock.Advance(9'999);
  EXPECT_FALSE(log.Allow(&suppressed));
  clock.Advance(1);
  EXPECT_TRUE(log.Allow(&suppressed));
  EXPECT_EQ(suppressed, 1001u);
  EXPECT_EQ(log.total_suppressed(), 1001u);
}

TEST(RateLimitedLog, AFloodWritesOneLineAndThenSaysHowManyWereDropped) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  auto logger = std::make_shared<spdlog::logger>("test", sink);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  testing::FakeClock clock;
  RateLimitedLog log(std::chrono::seconds(10), &clock);
  for (int i = 0; i < 100'000; ++i) log.Warn("dropped a reply to client {}", i);
  clock.Advance(10'000);
  log.Warn("dropped a reply to client {}", -1);
  const std::vector<std::string> lines = sink->last_formatted();
  spdlog::set_default_logger(previous);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("client 0"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("99999 similar lines suppressed"), std::string::npos) << lines[1];
}

}  // namespace
}  // namespace lmcache
