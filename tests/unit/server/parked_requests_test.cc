// ParkedRequests: every parked request ends exactly once, by whichever of
// its waker, its deadline (on a fake clock, kept by the deadline thread),
// its connection's close or a drain comes first; the limits refuse without
// parking; a waker outliving the parking lot does nothing.
#include "server/parked_requests.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "fakes/fake_clock.h"
#include "fakes/wait_until.h"

namespace lmcache::server {
namespace {

using testing::FakeClock;

// Records how each parked request ended.
class Ends {
 public:
  ParkedRequests::Finish For(int request) {
    return [this, request](ParkEnd why) {
      std::lock_guard<std::mutex> lock(mu_);
      ends_.emplace_back(request, why);
    };
  }
  std::vector<std::pair<int, ParkEnd>> Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return ends_;
  }
  // Waits (real time) until `n` requests ended. The bound only guards a hang
  // (callers assert the result), so it allows for a sanitizer build beside
  // CPU-bound neighbours.
  bool WaitFor(std::size_t n) {
    return testing::WaitUntil([&] { return Get().size() >= n; });
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<int, ParkEnd>> ends_;
};

using End = std::pair<int, ParkEnd>;

TEST(ParkedRequests, AWakerEndsItsRequestOnceAndOnlyItsOwn) {
  FakeClock clock;
  Ends ends;  // outlives the parking lot, whose destruction ends what is left
  auto parked = ParkedRequests::Create(&clock, {});
  auto first = parked->Park("op", "c", clock.NowMs() + 1000, ends.For(1));
  auto second = parked->Park("op", "c", clock.NowMs() + 1000, ends.For(2));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(parked->size(), 2u);
  (*second)();
  (*second)();  // a second wake finds nothing
  EXPECT_EQ(ends.Get(), (std::vector<End>{{2, ParkEnd::kWoken}}));
  EXPECT_EQ(parked->size(), 1u);
  const ParkedStats stats = parked->Stats();
  EXPECT_EQ(stats.requests, 1u);
  EXPECT_EQ(stats.by_operation.at("op").parked, 2u);
  EXPECT_EQ(stats.by_operation.at("op").ended[static_cast<std::size_t>(ParkEnd::kWoken)], 1u);
}

TEST(ParkedRequests, TheDeadlineThreadEndsRequestsInDeadlineOrderOnTheClocksTime) {
  FakeClock clock;
  Ends ends;  // outlives the parking lot, whose destruction ends what is left
  auto parked = ParkedRequests::Create(&clock, {});
  auto late = parked->Park("op", "c", clock.NowMs() + 500, ends.For(1));
  auto early = parked->Park("op", "c", clock.NowMs() + 100, ends.For(2));
  ASSERT_TRUE(late.ok() && early.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_TRUE(ends.Get().empty()) << "the fake clock has not moved";
  clock.Advance(100);
  ASSERT_TRUE(ends.WaitFor(1));
  EXPECT_EQ(ends.Get(), (std::vector<End>{{2, ParkEnd::kDeadline}}));
  clock.Advance(400);
  ASSERT_TRUE(ends.WaitFor(2));
  (*late)();  // too late: ended by its deadline
  EXPECT_EQ(ends.Get(), (std::vector<End>{{2, ParkEnd::kDeadline}, {1, ParkEnd::kDeadline}}));
}

TEST(ParkedRequests, AClosedConnectionEndsOnlyItsOwnRequests) {
  FakeClock clock;
  Ends ends;  // outlives the parking lot, whose destruction ends what is left
  auto parked = ParkedRequests::Create(&clock, {});
  ASSERT_TRUE(parked->Park("op", "gone", clock.NowMs() + 1000, ends.For(1)).ok());
  ASSERT_TRUE(parked->Park("op", "stays", clock.NowMs() + 1000, ends.For(2)).ok());
  ASSERT_TRUE(parked->Park("op", "gone", clock.NowMs() + 1000, ends.For(3)).ok());
  parked->CloseConnection("gone");
  parked->CloseConnection("never-parked");
  auto got = ends.Get();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<End>{{1, ParkEnd::kClosed}, {3, ParkEnd::kClosed}}));
  EXPECT_EQ(parked->size(), 1u);
}

TEST(ParkedRequests, LimitsRefuseWithoutParkingAndAClosedConnectionsShareComesBack) {
  FakeClock clock;
  Ends ends;
  auto parked = ParkedRequests::Create(&clock, ParkedLimits{2, 3});
  ASSERT_TRUE(parked->Park("op", "a", clock.NowMs() + 1000, ends.For(1)).ok());
  ASSERT_TRUE(parked->Park("op", "a", clock.NowMs() + 1000, ends.For(2)).ok());
  auto over = parked->Park("op", "a", clock.NowMs() + 1000, ends.For(3));
  EXPECT_EQ(over.status().code(), ErrorCode::kUnavailable);
  ASSERT_TRUE(parked->Park("op", "b", clock.NowMs() + 1000, ends.For(4)).ok());
  auto total = parked->Park("op", "c", clock.NowMs() + 1000, ends.For(5));
  EXPECT_EQ(total.status().code(), ErrorCode::kUnavailable) << "three parked in all";
  EXPECT_EQ(parked->Stats().by_operation.at("op").refused, 2u);
  parked->CloseConnection("a");
  EXPECT_TRUE(parked->Park("op", "a", clock.NowMs() + 1000, ends.For(6)).ok());
  parked->Drain();
  EXPECT_EQ(ends.Get().size(), 4u);  // 1, 2 (closed), 4, 6 (drained); never 3 or 5
  EXPECT_EQ(parked->Park("op", "a", clock.NowMs() + 1000, ends.For(7)).status().code(),
            ErrorCode::kUnavailable);
}

TEST(ParkedRequests, AWakerCalledAfterTheParkingLotIsGoneDoesNothing) {
  FakeClock clock;
  Ends ends;
  ParkedRequests::Waker waker;
  {
    auto parked = ParkedRequests::Create(&clock, {});
    auto parked_waker = parked->Park("op", "c", clock.NowMs() + 1000, ends.For(1));
    ASSERT_TRUE(parked_waker.ok());
    waker = *parked_waker;
  }  // destroyed: drained
  EXPECT_EQ(ends.Get(), (std::vector<End>{{1, ParkEnd::kDrained}}));
  waker();
  EXPECT_EQ(ends.Get().size(), 1u);
}

// Wakers, deadlines and closes racing on one request: it ends exactly once.
TEST(ParkedRequests, RacingEndsEndEachRequestExactlyOnce) {
  FakeClock clock;
  std::atomic<int> finished{0};
  auto parked = ParkedRequests::Create(&clock, ParkedLimits{100000, 100000});
  constexpr int kRequests = 2000;
  std::vector<ParkedRequests::Waker> wakers;
  for (int i = 0; i < kRequests; ++i) {
    auto waker = parked->Park("op", "c" + std::to_string(i % 4), clock.NowMs() + 1 + i % 7,
                              [&finished](ParkEnd) { finished.fetch_add(1); });
    ASSERT_TRUE(waker.ok());
    wakers.push_back(*waker);
  }
  std::thread waking([&] {
    for (auto& waker : wakers) waker();
  });
  std::thread closing([&] {
    for (int c = 0; c < 4; ++c) parked->CloseConnection("c" + std::to_string(c));
  });
  clock.Advance(10);
  parked->ExpireDue();
  waking.join();
  closing.join();
  // The deadline thread may still be running continuations it took out:
  // Drain returns only once none runs anywhere.
  parked->Drain();
  EXPECT_EQ(finished.load(), kRequests);
  EXPECT_EQ(parked->size(), 0u);
}

}  // namespace
}  // namespace lmcache::server
