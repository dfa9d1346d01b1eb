// FairQueue: round robin across clients, per-client and total bounds in bytes
// and count, per-client order, stop and drain.
#include "common/fair_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace lmcache {
namespace {

// Pops everything and returns the clients' names in the order they were served.
std::vector<std::string> Drain(FairQueue& queue, std::vector<std::string>* log) {
  queue.Stop();
  while (auto task = queue.Pop()) (*task)();
  return *log;
}

TEST(FairQueue, AFloodingClientDoesNotDelayAnotherBehindItsBacklog) {
  FairQueue queue(FairQueueLimits{});
  std::vector<std::string> log;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(queue.Push(1, 10, [&log] { log.push_back("flood"); }), FairQueue::Admission::kQueued);
  }
  ASSERT_EQ(queue.Push(2, 10, [&log] { log.push_back("polite"); }), FairQueue::Admission::kQueued);
  Drain(queue, &log);
  ASSERT_EQ(log.size(), 101u);
  // The polite client waits for one task of the flooder, not for a hundred.
  EXPECT_EQ(log[1], "polite");
}

TEST(FairQueue, ClientsAreServedRoundRobinAndEachInItsOwnOrder) {
  FairQueue queue(FairQueueLimits{});
  std::vector<std::string> log;
  for (char i = '0'; i < '3'; ++i) {
    queue.Push(1, 1, [&log, i] { log.push_back(std::string{'a', i}); });
    queue.Push(2, 1, [&log, i] { log.push_back(std::string{'b', i}); });
  }
  queue.Push(3, 1, [&log] { log.push_back("c0"); });
  Drain(queue, &log);
  EXPECT_EQ(log, (std::vector<std::string>{"a0", "b0", "c0", "a1", "b1", "a2", "b2"}));
}

TEST(FairQueue, AClientIsBoundedInBytesAndCountWithoutBlockingOthers) {
  FairQueueLimits limits;
  limits.client_tasks = 3;
  limits.client_bytes = 100;
  limits.total_tasks = 100;
  limits.total_bytes = 1000;
  FairQueue queue(limits);
  EXPECT_EQ(queue.Push(1, 60, [] {}), FairQueue::Admission::kQueued);
  EXPECT_EQ(queue.Push(1, 60, [] {}), FairQueue::Admission::kClientFull);  // 120 bytes > 100
  EXPECT_EQ(queue.Push(1, 10, [] {}), FairQueue::Admission::kQueued);
  EXPECT_EQ(queue.Push(1, 10, [] {}), FairQueue::Admission::kQueued);
  EXPECT_EQ(queue.Push(1, 1, [] {}), FairQueue::Admission::kClientFull);  // 4 tasks > 3
  EXPECT_EQ(queue.Push(2, 90, [] {}), FairQueue::Admission::kQueued);  // another client goes on
  EXPECT_EQ(queue.Stats().tasks, 4u);
  EXPECT_EQ(queue.Stats().bytes, 170u);
  EXPECT_EQ(queue.Stats().refused_client_full, 2u);
  // Popping gives the bytes back.
  (void)queue.Pop();
  EXPECT_EQ(queue.Push(1, 40, [] {}), FairQueue::Admission::kQueued);
}

TEST(FairQueue, TheTotalIsBoundedAcrossClients) {
  FairQueueLimits limits;
  limits.client_bytes = 100;
  limits.total_bytes = 150;
  FairQueue queue(limits);
  EXPECT_EQ(queue.Push(1, 100, [] {}), FairQueue::Admission::kQueued);
  EXPECT_EQ(queue.Push(2, 100, [] {}), FairQueue::Admission::kServerFull);
  EXPECT_EQ(queue.Push(2, 50, [] {}), FairQueue::Admission::kQueued);
  EXPECT_EQ(queue.Stats().refused_server_full, 1u);
  EXPECT_EQ(queue.Stats().clients, 2u);
}

TEST(FairQueue, StopRefusesNewTasksAndPopDrainsThenEnds) {
  FairQueue queue(FairQueueLimits{});
  int ran = 0;
  queue.Push(1, 1, [&ran] { ran += 1; });
  queue.Stop();
  EXPECT_EQ(queue.Push(1, 1, [&ran] { ran += 1; }), FairQueue::Admission::kStopped);
  auto task = queue.Pop();
  ASSERT_TRUE(task.has_value());
  (*task)();
  EXPECT_EQ(ran, 1);
  EXPECT_FALSE(queue.Pop().has_value());
}

TEST(FairQueue, PopWaitsForAPush) {
  FairQueue queue(FairQueueLimits{});
  std::thread producer([&queue] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    queue.Push(7, 1, [] {});
  });
  EXPECT_TRUE(queue.Pop().has_value());
  producer.join();
}

}  // namespace
}  // namespace lmcache
