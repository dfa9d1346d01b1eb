// ThreadPool and AffinityPool: tasks run, one key's tasks run in order on one
// lane, a throwing task costs itself only, Stop drains, limits refuse.
#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace lmcache {
namespace {

TEST(ThreadPool, RunsEveryTaskAndStopDrainsTheQueue) {
  ThreadPool pool("test", 2, FairQueueLimits{});
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(pool.Submit(static_cast<std::uint64_t>(i % 7), 1, [&ran] { ran += 1; }),
              FairQueue::Admission::kQueued);
  }
  pool.Stop();
  EXPECT_EQ(ran.load(), 1000);
  EXPECT_EQ(pool.Submit(1, 1, [] {}), FairQueue::Admission::kStopped);
}

TEST(ThreadPool, AThrowingTaskDoesNotStopTheWorker) {
  ThreadPool pool("test", 1, FairQueueLimits{});
  std::atomic<int> ran{0};
  pool.Submit(1, 1, [] { throw std::runtime_error("boom"); });
  pool.Submit(1, 1, [&ran] { ran += 1; });
  pool.Stop();
  EXPECT_EQ(ran.load(), 1);
}

TEST(ThreadPool, RefusesAClientOverItsShare) {
  FairQueueLimits limits;
  limits.client_tasks = 2;
  ThreadPool pool("test", 1, limits);
  std::mutex gate;
  gate.lock();  // the worker blocks on the first task, so the rest stay queued
  std::promise<void> started;
  std::future<void> first_task_running = started.get_future();
  pool.Submit(1, 1, [&gate, &started] {
    started.set_value();
    std::lock_guard<std::mutex> hold(gate);
  });
  // The first task has left the queue once it runs; only then is client 1's
  // queue empty, so its share is exactly two more tasks.
  EXPECT_EQ(first_task_running.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(pool.Submit(1, 1, [] {}), FairQueue::Admission::kQueued);
  EXPECT_EQ(pool.Submit(1, 1, [] {}), FairQueue::Admission::kQueued);
  EXPECT_EQ(pool.Submit(1, 1, [] {}), FairQueue::Admission::kClientFull);
  EXPECT_EQ(pool.Submit(2, 1, [] {}), FairQueue::Admission::kQueued);
  gate.unlock();
  pool.Stop();
}

TEST(AffinityPool, OneKeysTasksRunInOrderOnOneThread) {
  AffinityPool pool("test", 3, FairQueueLimits{});
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 200; ++i) {
    pool.Submit(42, 1, [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
    pool.Submit(static_cast<std::uint64_t>(i), 1, [] {});  // other clients interleave
  }
  pool.Stop();
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  for (const auto& id : threads) EXPECT_EQ(id, threads.front());
}

}  // namespace
}  // namespace lmcache
