// L1Cache: assembles segment, allocator, policy, table and evictor in order,
// refuses what it cannot build with a message that says what to change, wires
// the table's listeners, and removes its segment when it goes.
#include "store/l1_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "fakes/fake_clock.h"
#include "fakes/keys.h"

namespace lmcache::store {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

class L1CacheTest : public ::testing::Test {
 protected:
  L1CacheTest() {
    config_.shm_name = "lmcache_l1_pool_l1_test_" + std::to_string(getpid());
    config_.size_bytes = 16 * kMiB;
    config_.prefault_threads = 1;
    config_.allocator.slab_target_bytes = 2 * kMiB;
  }
  bool SegmentExists() const {
    return std::filesystem::exists("/dev/shm/" + config_.shm_name);
  }
  // Stages and admits `n` objects of 1 MiB.
  static void Store(L1Cache& cache, std::uint64_t first, std::size_t n) {
    auto lease = cache.table().ReserveWrite(testing::KeysN(first, n), kMiB, Owner::Instance(1),
                                            AllocationMode::kAllOrNothing);
    ASSERT_TRUE(lease.ok());
    ASSERT_EQ(lease->reserved, n);
    ASSERT_EQ(cache.table().FinishWrite(lease->lease).admitted, n);
  }

  L1Config config_;
  testing::FakeClock clock_;
};

TEST_F(L1CacheTest, BuildsAWorkingTierAndRemovesItsSegmentWhenDestroyed) {
  {
    auto cache = L1Cache::Create(config_, &clock_);
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    EXPECT_TRUE(SegmentExists());
    EXPECT_EQ((*cache)->segment().size(), 16 * kMiB);
    EXPECT_EQ((*cache)->allocator().capacity_bytes(), 16 * kMiB);
    ASSERT_TRUE((*cache)->WaitPrefaulted(std::chrono::seconds(30)));
    EXPECT_EQ((*cache)->prefault().ready_bytes, 16 * kMiB);
    Store(**cache, 0, 3);
    EXPECT_EQ((*cache)->table().Stats().resident_objects, 3u);
    EXPECT_EQ((*cache)->flow().admitted_objects, 3u);  // the flow counters listen
    EXPECT_EQ((*cache)->flow().admitted_bytes, 3 * kMiB);
  }
  EXPECT_FALSE(SegmentExists());
}

TEST_F(L1CacheTest, PrefaultsInTheBackgroundAndHandsOutOnlyFaultedPages) {
  config_.size_bytes = 64 * kMiB;
  config_.prefault_step_bytes = 8 * kMiB;
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(cache.ok());
  // Whatever was faulted when a store ran, the store got pages below it.
  auto lease = (*cache)->table().ReserveWrite(testing::KeysN(0, 40), kMiB, Owner::Instance(1),
                                              AllocationMode::kAllOrNothing);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->reserved, 40u);  // it waited for pages rather than fail
  ASSERT_TRUE((*cache)->WaitPrefaulted(std::chrono::seconds(30)));
  const L1Cache::PrefaultProgress done = (*cache)->prefault();
  EXPECT_TRUE(done.done);
  EXPECT_EQ(done.ready_bytes, done.total_bytes);
  EXPECT_EQ((*cache)->allocator().Stats().unready_bytes, 0u);
  (*cache)->table().AbortWrite(lease->lease);
}

TEST_F(L1CacheTest, WithoutBackgroundPrefaultEveryPageIsUsableAtOnce) {
  config_.background_prefault = false;
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(cache.ok());
  EXPECT_TRUE((*cache)->prefault().done);
  EXPECT_EQ((*cache)->allocator().ready_bytes(), 16 * kMiB);
}

TEST_F(L1CacheTest, TheEvictorListensAndRunsWhenAnAdmissionCrossesTheTrigger) {
  config_.evictor.interval_ms = 3'600'000;  // only a nudge can run a pass here
  config_.background_prefault = false;
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(cache.ok());
  Store(**cache, 0, 14);  // 87.5 % of 16 MiB
  // Listeners hear of an eviction after its memory is freed (listener.h): wait for both.
  const auto settled = [&] {
    return (*cache)->allocator().UsedBytes() <= 9 * kMiB &&
           (*cache)->flow().evicted_objects == 14u - (*cache)->table().Stats().resident_objects;
  };
  for (int i = 0; i < 5000 && !settled(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_LE((*cache)->allocator().UsedBytes(), 9 * kMiB);  // down to 0.6 of the pool
  EXPECT_EQ((*cache)->flow().evicted_objects, 14u - (*cache)->table().Stats().resident_objects);
  EXPECT_GE((*cache)->evictor().Stats().nudges, 1u);
}

TEST_F(L1CacheTest, WithoutBackgroundEvictionNothingIsEvictedBehindTheCallersBack) {
  config_.background_eviction = false;
  config_.background_prefault = false;
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(cache.ok());
  Store(**cache, 0, 15);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ((*cache)->table().Stats().resident_objects, 15u);
  EXPECT_EQ((*cache)->evictor().Stats().passes, 0u);
}

TEST_F(L1CacheTest, ASecondCacheOnALiveSegmentIsRefusedAndTheFirstKeepsItsPool) {
  auto first = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(first.ok());
  Store(**first, 0, 2);
  auto second = L1Cache::Create(config_, &clock_);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(std::to_string(getpid())), std::string::npos)
      << second.status().ToString();
  EXPECT_TRUE(SegmentExists());
  EXPECT_EQ((*first)->table().Stats().resident_objects, 2u);
}

TEST_F(L1CacheTest, APoolLargerThanDevShmIsRefusedWithTheFix) {
  config_.size_bytes = 1ull << 50;  // 1 PiB
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), ErrorCode::kShmTooSmall);
  EXPECT_NE(cache.status().message().find("--l1-size-gb"), std::string::npos);
  EXPECT_FALSE(SegmentExists());
}

TEST_F(L1CacheTest, InvalidPolicyOrEvictorSettingsAreRefusedBeforeAnythingIsBuilt) {
  config_.eviction_policy = "FIFO";
  EXPECT_EQ(L1Cache::Create(config_, &clock_).status().code(), ErrorCode::kInvalidConfig);
  config_.eviction_policy = "LRU";
  config_.evictor.eviction_ratio = 0;
  auto refused = L1Cache::Create(config_, &clock_);
  EXPECT_NE(refused.status().message().find("--eviction-ratio"), std::string::npos);
  EXPECT_FALSE(SegmentExists());
}

}  // namespace
}  // namespace lmcache::store
