#include "store/evictor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "fakes/wait_until.h"
#include "fakes/aligned_buffer.h"
#include "fakes/fake_clock.h"
#include "fakes/keys.h"

namespace lmcache::store {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

using testing::WaitUntil;

TEST(EvictorMath, FreesDownToTriggerMinusRatio) {
  EvictorConfig config;  // 0.8 trigger, 0.2 ratio -> low watermark 0.6
  EXPECT_EQ(Evictor::BytesToEvict(79, 100, config), 0u);
  EXPECT_EQ(Evictor::BytesToEvict(80, 100, config), 20u);
  EXPECT_EQ(Evictor::BytesToEvict(100, 100, config), 40u);
  config.eviction_ratio = 1.0;  // low watermark clamps at 0
  EXPECT_EQ(Evictor::BytesToEvict(90, 100, config), 90u);
  EXPECT_EQ(Evictor::BytesToEvict(5, 0, config), 0u);
}

TEST(EvictorConfig, ValidationNamesTheFlag) {
  EvictorConfig config;
  EXPECT_TRUE(ValidateEvictorConfig(config).ok());
  config.trigger_watermark = 0;
  EXPECT_NE(ValidateEvictorConfig(config).message().find("--eviction-trigger-watermark"),
            std::string::npos);
  config.trigger_watermark = 1.5;
  EXPECT_FALSE(ValidateEvictorConfig(config).ok());
  config = EvictorConfig{};
  config.eviction_ratio = -0.1;
  EXPECT_NE(ValidateEvictorConfig(config).message().find("--eviction-ratio"), std::string::npos);
  config = EvictorConfig{};
  config.interval_ms = 0;
  EXPECT_FALSE(ValidateEvictorConfig(config).ok());
}

class EvictorTest : public ::testing::Test {
 protected:
  EvictorTest() : buffer_(20 * kMiB) {
    alloc::SlabAllocatorConfig alloc_config;
    alloc_config.slab_target_bytes = 2 * kMiB;
    allocator_ = std::move(alloc::SlabAllocator::Create(buffer_.span(), alloc_config)).value();
    ObjectTableConfig table_config;
    table_config.on_demand_eviction = false;
    table_ = std::make_unique<ObjectTable>(allocator_.get(), &lru_, &clock_, table_config);
  }
  void Fill(std::size_t objects) {
    const auto keys = testing::KeysN(next_, objects);
    next_ += objects;
    auto lease = table_->ReserveWrite(keys, kMiB, Owner::Instance(1), AllocationMode::kAllOrNothing);
    ASSERT_EQ(lease->reserved,
              objects);
    table_->FinishWrite(lease->lease);
  }
  testing::AlignedBuffer buffer_;
  std::unique_ptr<alloc::SlabAllocator> allocator_;
  testing::FakeClock clock_;
  LruPolicy lru_;
  std::unique_ptr<ObjectTable> table_;
  std::uint64_t next_ = 0;
};

TEST_F(EvictorTest, PassBelowTriggerEvictsNothing) {
  Fill(15);  // 75 % of 20 MiB
  Evictor evictor(table_.get(), EvictorConfig{});
  evictor.RunPass();
  EXPECT_EQ(allocator_->UsedBytes(), 15 * kMiB);
  const EvictorStats stats = evictor.Stats();
  EXPECT_EQ(stats.passes, 1u);
  EXPECT_EQ(stats.triggered_passes, 0u);
  EXPECT_GT(stats.last_success_wall_seconds, 0);
}

TEST_F(EvictorTest, PassAboveTriggerFreesToLowWatermarkInBytes) {
  Fill(18);  // 90 %
  Evictor evictor(table_.get(), EvictorConfig{});
  evictor.RunPass();
  EXPECT_EQ(allocator_->UsedBytes(), 12 * kMiB);  // 60 % of 20 MiB
  EXPECT_EQ(evictor.Stats().evicted_objects, 6u);
  EXPECT_EQ(evictor.Stats().evicted_bytes, 6 * kMiB);
  EXPECT_EQ(evictor.Stats().triggered_passes, 1u);
}

TEST_F(EvictorTest, LockedObjectsLimitWhatAPassCanFree) {
  Fill(18);
  const auto locked = testing::KeysN(0, 16);
  ReadRequest request;
  request.keys = locked;
  request.owner = Owner::Instance(7);
  ASSERT_EQ(table_->AcquireRead(request)->granted, 16u);
  Evictor evictor(table_.get(), EvictorConfig{});
  evictor.RunPass();
  EXPECT_EQ(allocator_->UsedBytes(), 16 * kMiB);  // only the two unlocked went
  EXPECT_EQ(evictor.Stats().errors, 0u);
}

// A pass ends expired write leases; a worker's staged copies are then
// quarantined (it may still write them), freed once the worker goes.
TEST_F(EvictorTest, PassQuarantinesAWorkersExpiredWrites) {
  ASSERT_EQ(
      table_->ReserveWrite(testing::KeysN(50, 3), kMiB, Owner::Instance(9),
                           AllocationMode::kAllOrNothing)
          ->reserved,
      3u);
  clock_.Advance(table_->config().write_ttl_ms + 1);
  Evictor evictor(table_.get(), EvictorConfig{});
  evictor.RunPass();
  EXPECT_EQ(evictor.Stats().reclaimed_objects, 0u);
  EXPECT_EQ(table_->Stats().quarantined_objects, 3u);
  EXPECT_EQ(table_->Stats().staging_objects, 0u);
  EXPECT_EQ(allocator_->UsedBytes(), 3 * kMiB);
  table_->ReleaseOwner(Owner::Instance(9));
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
}

TEST_F(EvictorTest, BackgroundThreadRunsAndStops) {
  Fill(18);
  EvictorConfig config;
  config.interval_ms = 5;
  Evictor evictor(table_.get(), config);
  evictor.Start();
  evictor.Nudge();
  WaitUntil([&] { return allocator_->UsedBytes() <= 12 * kMiB; });
  evictor.Stop();
  EXPECT_EQ(allocator_->UsedBytes(), 12 * kMiB);
  EXPECT_GE(evictor.Stats().passes, 1u);
}

TEST_F(EvictorTest, AnAdmissionOverTheTriggerStartsAPassWithoutWaitingForTheInterval) {
  EvictorConfig config;
  config.interval_ms = 3'600'000;  // an hour: only a nudge can run a pass in this test
  Evictor evictor(table_.get(), config);
  table_->AddListener(&evictor);
  evictor.Start();
  Fill(15);  // 75 %: below the trigger, no nudge
  EXPECT_EQ(evictor.Stats().nudges, 0u);
  Fill(2);  // 85 %
  // The bound (a minute) is far below the hour's interval: a pass within it
  // was started by the nudge.
  WaitUntil([&] { return allocator_->UsedBytes() <= 12 * kMiB; });
  evictor.Stop();
  EXPECT_EQ(allocator_->UsedBytes(), 12 * kMiB);
  EXPECT_EQ(evictor.Stats().nudges, 1u);
  EXPECT_EQ(evictor.Stats().triggered_passes, 1u);
}

}  // namespace
}  // namespace lmcache::store
