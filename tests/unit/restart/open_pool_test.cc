// OpenPool: the one place that decides where a server's pool comes from.
// A crashed server's pool is recovered with --recover-pool and replaced
// (its journal removed) without it; nothing to recover or nobody to take
// over from starts cold; the endpoints are bound before any pool is touched,
// so a server refused there leaves a crashed predecessor's pool recoverable.
// The takeover itself is takeover_test's and tests/python/test_warm_restart.py's.
#include "restart/open_pool.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "fakes/crashed_pool.h"
#include "fakes/fake_clock.h"
#include "restart/pool_journal.h"
#include "restart/pool_recovery.h"

namespace lmcache::restart {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

class OpenPoolTest : public ::testing::Test {
 protected:
  OpenPoolTest() {
    // spdlog's registry is made by its first user: here, on this thread,
    // before the pool's pre-faulter logs from its own (as the server's
    // InitLogging does first thing).
    spdlog::default_logger();
    l1_.shm_name = "lmcache_l1_pool_open_test_" + std::to_string(getpid());
    l1_.size_bytes = 16 * kMiB;
    l1_.prefault_threads = 1;
    l1_.allocator.slab_target_bytes = 2 * kMiB;
    config_.shm_name_given = true;
    config_.chunk_sizes = store::ChunkSizes(256);
  }
  ~OpenPoolTest() override {
    std::filesystem::remove(SegmentPath());
    std::filesystem::remove(JournalPath());
  }
  std::string SegmentPath() const { return "/dev/shm/" + l1_.shm_name; }
  std::string JournalPath() const { return "/dev/shm/" + JournalName(l1_.shm_name); }
  // Binds nothing; counts its calls and remembers what it was told.
  Result<OpenedPool> Open(Status bind_result = Status::Ok()) {
    return OpenPool(&l1_, config_, clock_, [this, bind_result](bool after_takeover) {
      binds_ += 1;
      bound_after_takeover_ = after_takeover;
      // Nothing of a pool is touched before the endpoints are bound.
      segment_existed_at_bind_ = std::filesystem::exists(SegmentPath());
      return bind_result;
    });
  }

  store::L1Config l1_;
  RestartConfig config_;
  testing::FakeClock clock_;
  int binds_ = 0;
  bool bound_after_takeover_ = true;
  bool segment_existed_at_bind_ = false;
};

TEST_F(OpenPoolTest, WithRecoverPoolACrashedServersPoolIsRecoveredAndJournaledAgain) {
  ASSERT_TRUE(testing::CrashAServerAfterStoring(l1_, &clock_));
  config_.recover_pool = true;
  auto opened = Open();
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(binds_, 1);
  EXPECT_FALSE(bound_after_takeover_);
  EXPECT_EQ(opened->origin, PoolOrigin::kRecovered);
  EXPECT_STREQ(PoolOriginName(opened->origin), "recovered");
  EXPECT_TRUE(opened->stats.recovered);
  EXPECT_FALSE(opened->stats.took_over);
  EXPECT_EQ(opened->stats.recovered_objects, 6u);
  EXPECT_EQ(opened->stats.recovered_bytes, 6 * kMiB);
  EXPECT_EQ(opened->stats.recovery_held_slots, 2u);
  EXPECT_EQ(opened->cache->table().Stats().resident_objects, 6u);
  ASSERT_NE(opened->cache->journal(), nullptr) << "a recovered server journals too";
  EXPECT_NE(dynamic_cast<PoolJournal*>(opened->cache->journal()), nullptr);
}

TEST_F(OpenPoolTest, WithoutRecoverPoolACrashedServersPoolIsReplacedAndItsJournalRemoved) {
  ASSERT_TRUE(testing::CrashAServerAfterStoring(l1_, &clock_));
  ASSERT_TRUE(std::filesystem::exists(JournalPath()));
  auto opened = Open();
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->origin, PoolOrigin::kCold);
  EXPECT_EQ(opened->cache->table().Stats().resident_objects, 0u);
  EXPECT_EQ(opened->cache->journal(), nullptr);
  // A journal must not outlive the bytes it describes: a later recovery
  // finds nothing to trust.
  EXPECT_FALSE(std::filesystem::exists(JournalPath()));
  opened->cache->Disown();  // as if this one crashed too
  opened->cache.reset();
  RecoveryReport report;
  EXPECT_EQ(RecoverPool(l1_, &clock_, &report).status().code(), ErrorCode::kNotFound);
}

TEST_F(OpenPoolTest, AServerRefusedAtItsEndpointsLeavesACrashedPoolRecoverable) {
  ASSERT_TRUE(testing::CrashAServerAfterStoring(l1_, &clock_));
  config_.recover_pool = true;
  auto refused = Open(Status(ErrorCode::kAlreadyExists, "the endpoint is taken"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_TRUE(segment_existed_at_bind_);
  EXPECT_TRUE(std::filesystem::exists(SegmentPath()));
  EXPECT_TRUE(std::filesystem::exists(JournalPath()));
  // Without --recover-pool too: the journal is removed only once bound.
  config_.recover_pool = false;
  EXPECT_FALSE(Open(Status(ErrorCode::kAlreadyExists, "taken")).ok());
  EXPECT_TRUE(std::filesystem::exists(JournalPath()));
  config_.recover_pool = true;
  auto recovered = Open();
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_EQ(recovered->origin, PoolOrigin::kRecovered);
  EXPECT_EQ(recovered->stats.recovered_objects, 6u);
}

TEST_F(OpenPoolTest, NothingToRecoverOrNobodyToTakeOverFromStartsCold) {
  config_.recover_pool = true;
  auto opened = Open();
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->origin, PoolOrigin::kCold);
  EXPECT_FALSE(segment_existed_at_bind_);
  EXPECT_FALSE(opened->stats.recovered);
  ASSERT_NE(opened->cache->journal(), nullptr);
  EXPECT_TRUE(std::filesystem::exists(JournalPath())) << "a new pool's journal is published";
  opened->cache.reset();
  EXPECT_FALSE(std::filesystem::exists(JournalPath())) << "and goes with its pool";

  config_.recover_pool = false;
  config_.takeover = TakeoverMode::kOn;
  config_.socket_path = "/tmp/lmcache-open-pool-test-nobody-" + std::to_string(getpid());
  config_.timeout = std::chrono::seconds(5);
  auto cold = Open();
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  EXPECT_EQ(cold->origin, PoolOrigin::kCold);
  EXPECT_FALSE(bound_after_takeover_);
  EXPECT_FALSE(cold->stats.took_over);
}

TEST_F(OpenPoolTest, TheTakeoverGeometryIsThePoolsLayoutNameAndChunkSize) {
  l1_.allocator.align_bytes = 8192;
  const TakeoverGeometry geometry = TakeoverGeometryOf(l1_, store::ChunkSizes(64, {{"glm", 640}}));
  EXPECT_EQ(geometry.shm_name, l1_.shm_name);
  EXPECT_EQ(geometry.pool, store::GeometryOf(l1_));
  EXPECT_EQ(geometry.pool.pool_bytes, 16 * kMiB);
  EXPECT_EQ(geometry.pool.align_bytes, 8192u);
  EXPECT_EQ(geometry.chunk_sizes, store::ChunkSizes(64, {{"glm", 640}}));
}

}  // namespace
}  // namespace lmcache::restart
