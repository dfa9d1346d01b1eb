// PageWarmer: a client's mapping of the pool is faulted in before its copies.
// The server side is a real ShmSegment pre-faulted by PrefaultRange; the
// client side is a second mapping (Attach), as a worker process has.
#include "shm/page_warmer.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "fakes/sanitizers.h"

namespace lmcache::shm {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

using testing::kThreadSanitizer;

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

std::string TestName(const char* tag) {
  return "lmcache_l1_pool_warmer_" + std::string(tag) + "_" + std::to_string(getpid());
}

TEST(PageWarmer, AfterWarmingACopyIntoEveryPageTakesNoFault) {
  auto server = ShmSegment::Create({TestName("all"), 64 * kMiB});
  ASSERT_TRUE(server.ok());
  (*server)->Prefault(1);
  auto client = ShmSegment::Attach((*server)->name(), 64 * kMiB);
  ASSERT_TRUE(client.ok());
  std::vector<std::byte> source(64 * kMiB, std::byte{7});
  {
    PageWarmer warmer(client->get());
    ASSERT_TRUE(warmer.WaitDone(std::chrono::seconds(30)));
    EXPECT_EQ(warmer.warmed_bytes(), 64 * kMiB);
  }
  const long before = MinorFaults();
  std::memcpy((*client)->base(), source.data(), source.size());
  // Without the warmer this copy takes 16384 faults (one per 4 KiB page).
  // Under TSan the count is of TSan's own shadow pages for the copied range
  // (16384 as well), so only the other builds can assert it.
  if (!kThreadSanitizer) {
    EXPECT_LT(MinorFaults() - before, 64);
  }
  EXPECT_EQ((*server)->base()[64 * kMiB - 1], std::byte{7});
}

TEST(PageWarmer, WarmsOnlyWhatTheServerWroteAndFollowsItAsItGrows) {
  auto server = ShmSegment::Create({TestName("grow"), 64 * kMiB, "/dev/shm", false});
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->Reserve(0, 64 * kMiB, "/dev/shm").ok());
  (*server)->PrefaultRange(0, 16 * kMiB, 1);
  auto client = ShmSegment::Attach((*server)->name(), 64 * kMiB);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->WrittenEnd(0), 16 * kMiB);  // reserved but unwritten pages are holes
  PageWarmer warmer(client->get());
  EXPECT_FALSE(warmer.WaitDone(std::chrono::milliseconds(200)));
  EXPECT_EQ(warmer.warmed_bytes(), 16 * kMiB);
  (*server)->PrefaultRange(16 * kMiB, 48 * kMiB, 1);
  EXPECT_TRUE(warmer.WaitDone(std::chrono::seconds(30)));
  EXPECT_EQ(warmer.warmed_bytes(), 64 * kMiB);
}

TEST(PageWarmer, StopsPromptlyWhenTheServerNeverFinishes) {
  auto server = ShmSegment::Create({TestName("stop"), 64 * kMiB, "/dev/shm", false});
  ASSERT_TRUE(server.ok());
  auto client = ShmSegment::Attach((*server)->name(), 64 * kMiB);
  ASSERT_TRUE(client.ok());
  // Destroyed, a warmer stops at once rather than at its give-up time.
  constexpr auto kGiveUp = std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  {
    PageWarmer warmer(client->get(), kGiveUp);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(warmer.warmed_bytes(), 0u);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, kGiveUp / 2);
  PageWarmer gives_up(client->get(), std::chrono::milliseconds(100));
  constexpr auto kWait = std::chrono::seconds(60);
  const auto waited_from = std::chrono::steady_clock::now();
  EXPECT_FALSE(gives_up.WaitDone(kWait));
  // It returned because the warmer gave up, not because the wait timed out.
  EXPECT_LT(std::chrono::steady_clock::now() - waited_from, kWait / 2);
}

TEST(PageWarmer, PrefaultRangeKeepsWhatIsThere) {
  auto server = ShmSegment::Create({TestName("keep"), 8 * kMiB});
  ASSERT_TRUE(server.ok());
  std::memset((*server)->base(), 0x5a, 8 * kMiB);
  (*server)->PrefaultRange(0, 8 * kMiB, 2);
  for (std::uint64_t off = 0; off < 8 * kMiB; off += 4096) {
    ASSERT_EQ((*server)->base()[off], std::byte{0x5a}) << off;
  }
}

}  // namespace
}  // namespace lmcache::shm
