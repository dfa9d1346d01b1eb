// PeriodicThread: runs on its period and when nudged, survives a throwing
// task, records its heartbeat, stops promptly.
#include "common/periodic_thread.h"

#include <gtest/gtest.h>

#include "fakes/wait_until.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace lmcache {
namespace {

using testing::WaitUntil;

TEST(PeriodicThread, RunsWhenNudgedAndRecordsItsHeartbeat) {
  std::atomic<int> runs{0};
  PeriodicThread thread("test", std::chrono::hours(1), [&runs] { runs += 1; });
  EXPECT_EQ(thread.last_run_ms(), 0);
  thread.Start();
  thread.Nudge();
  // The heartbeat is recorded after the task returns: wait for it, not for
  // the task's own count.
  WaitUntil([&] { return thread.runs() >= 1 && thread.last_run_ms() > 0; });
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
  WaitUntil([&] { return calls.load() >= 6; });
  thread.Stop();
  EXPECT_GE(calls.load(), 6);
  EXPECT_GE(thread.errors(), 3u);
  EXPECT_EQ(thread.runs(), static_cast<std::uint64_t>(calls.load()));
}

}  // namespace
}  // namespace lmcache
