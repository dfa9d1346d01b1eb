// ConditionLog: one line per condition entered, one per recovery.
#include "common/condition_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

namespace lmcache {
namespace {

int Count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(ConditionLogTest, LogsEachConditionOnceAndTheRecoveryOnce) {
  std::ostringstream out;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)));
  ConditionLog log("L2 fs /data");
  for (int i = 0; i < 100; ++i) log.Fail("disk full", "write: No space left on device");
  EXPECT_EQ(log.current(), "disk full");
  log.Fail("directory missing", "create: No such file or directory");
  log.Ok();
  log.Ok();
  EXPECT_EQ(log.current(), "");
  EXPECT_EQ(log.entered(), 2u);
  spdlog::set_default_logger(previous);
  const std::string text = out.str();
  EXPECT_EQ(Count(text, "disk full"), 1) << text;
  EXPECT_EQ(Count(text, "directory missing"), 2) << text;  // entered, then recovered from
  EXPECT_EQ(Count(text, "recovered"), 1) << text;
}

}  // namespace
}  // namespace lmcache
