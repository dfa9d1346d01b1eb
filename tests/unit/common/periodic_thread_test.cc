// PeriodicThread: runs on its period and when nudged, survives a throwing
// task, records its heartbeat, stops promptly.
#include "common/periodic_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

namespace lmcache {
namespace {

TEST(PeriodicThread, RunsWhenNudgedAndRecordsItsHeartbeat) {
  std::atomic<int> runs{0};
  PeriodicThread thread("test", std::chrono::hours(1), [&runs] { runs += 1; });
  EXPECT_EQ(thread.last_run_ms(), 0);
  thread.Start();
  thread.Nudge();
  for (int i = 0; i < 500 && runs.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(runs.load(), 1);
  EXPECT_GT(thread.last_run_ms(), 0);
  thread.Stop();  // promptly, although the period is an hour
  EXPECT_EQ(thread.runs(), 1u);
}

TEST(PeriodicThread, AThrowingTaskIsCountedAndTheLoopGoesOn) {
  std::atomic<int> calls{0};
  PeriodicThread thread("test", std::chrono::milliseconds(1), [&calls] {
    if (calls.fetch_add(1) % 2 == 0) throw std::runtime_error("boom");
  });
  thread.Start();
  for (int i = 0; i < 1000 && calls.load() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  thread.Stop();
  EXPECT_GE(calls.load(), 6);
  EXPECT_GE(thread.errors(), 3u);
  EXPECT_EQ(thread.runs(), static_cast<std::uint64_t>(calls.load()));
}

}  // namespace
}  // namespace lmcache
