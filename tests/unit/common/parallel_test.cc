#include "common/parallel.h"

#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace lmcache {
namespace {

TEST(ParallelFor, CoversEveryIndexExactlyOnce) {
  for (const std::size_t count : {0u, 1u, 7u, 1000u, 4099u}) {
    std::vector<std::atomic<int>> hits(count);
    ParallelFor(count, 64, 4, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) hits[i]++;
    });
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(hits[i].load(), 1) << count << " " << i;
  }
}

TEST(ParallelFor, RangesStartOnGrainBoundaries) {
  std::atomic<int> misaligned{0};
  ParallelFor(10'000, 256, 3, [&](std::size_t begin, std::size_t) {
    if (begin % 256 != 0) misaligned++;
  });
  EXPECT_EQ(misaligned.load(), 0);
}

TEST(ParallelRunner, CoversEveryIndexExactlyOnceOnEveryRun) {
  ParallelRunner runner(4);
  EXPECT_EQ(runner.threads(), 4u);
  // Counts that need all four threads, fewer, and one.
  for (const std::size_t count : {0u, 1u, 7u, 100u, 1000u, 4099u, 130u, 64u}) {
    std::vector<std::atomic<int>> hits(count);
    runner.Run(count, 64, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) hits[i]++;
    });
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(hits[i].load(), 1) << count << " " << i;
  }
}

// The reason it exists: a client's copies run on the same threads every time
// (ParallelFor made and unmapped a thread, and its stack, per copy).
TEST(ParallelRunner, KeepsItsThreadsAcrossRuns) {
  ParallelRunner runner(3);
  Mutex mu;
  std::set<long> thread_ids;
  for (int run = 0; run < 200; ++run) {
    runner.Run(3000, 1000, [&](std::size_t, std::size_t) {
      MutexLock lock(&mu);
      thread_ids.insert(syscall(SYS_gettid));
    });
  }
  EXPECT_EQ(thread_ids.size(), 3u);  // the caller and two helpers, never a new one
}

TEST(ParallelRunner, ConcurrentCallersEachGetTheirWholeRange) {
  ParallelRunner runner(2);
  constexpr std::size_t kCount = 10'000;
  std::vector<std::atomic<int>> a(kCount), b(kCount);
  auto hammer = [&runner](std::vector<std::atomic<int>>& hits) {
    for (int run = 0; run < 50; ++run) {
      runner.Run(kCount, 100, [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) hits[i]++;
      });
    }
  };
  std::thread other([&] { hammer(b); });
  hammer(a);
  other.join();
  for (std::size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(a[i].load(), 50) << i;
    ASSERT_EQ(b[i].load(), 50) << i;
  }
}

// A client forked after it connected: the child has the runner but not its
// threads. Its Run must still cover everything, on the calling thread,
// instead of waiting forever for helpers that do not exist.
TEST(ParallelRunner, AForkedChildRunsEverythingItself) {
  ParallelRunner runner(3);
  runner.Run(30, 1, [](std::size_t, std::size_t) {});  // the helpers are up
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(10);  // a hang is a failure, not a stuck test
    std::vector<int> hits(3000, 0);
    runner.Run(hits.size(), 100, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) hits[i]++;
    });
    for (const int h : hits) {
      if (h != 1) _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ParallelRunner, OneThreadRunsOnTheCaller) {
  ParallelRunner runner(1);
  const long caller = syscall(SYS_gettid);
  long ran_on = 0;
  runner.Run(10, 1, [&](std::size_t begin, std::size_t end) {
    EXPECT_EQ(begin, 0u);
    EXPECT_EQ(end, 10u);
    ran_on = syscall(SYS_gettid);
  });
  EXPECT_EQ(ran_on, caller);
}

}  // namespace
}  // namespace lmcache
