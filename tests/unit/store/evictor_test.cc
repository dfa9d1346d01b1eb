#include "store/evictor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
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
  // Objects n .. n + count - 1 of kSmallObject bytes, each admitted alone
  // (the first is the least recently used).
  void FillSmall(std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      auto lease = table_->ReserveWrite(testing::KeysN(next_++, 1), kSmallObject,
                                        Owner::Instance(1), AllocationMode::kAllOrNothing);
      ASSERT_EQ(lease->reserved, 1u);
      table_->FinishWrite(lease->lease);
    }
  }
  static constexpr std::uint64_t kSmallObject = 16 << 10;
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

// ---- the last-copy bias (issue 43, section 3) ----

std::vector<UsedCandidate> Window(std::vector<std::uint64_t> last_uses) {
  std::vector<UsedCandidate> window;
  for (std::size_t i = 0; i < last_uses.size(); ++i) {
    window.push_back({testing::KeyN(i), last_uses[i]});
  }
  return window;
}

TEST(LastCopyOrder, ALastCopyRanksAsIfUsedTheHorizonLater) {
  // Uses 1..6; 2 and 4 (uses 3 and 5) are held elsewhere. With a horizon of
  // 100 every last copy ranks after them.
  const auto window = Window({1, 2, 3, 4, 5, 6});
  const std::vector<bool> expendable = {false, false, true, false, true, false};
  EXPECT_EQ(Evictor::LastCopyOrder(window, expendable, /*horizon=*/100),
            (std::vector<std::size_t>{2, 4, 0, 1, 3, 5}));
  // With a horizon of 3 the last copies rank 4, 5, 7, 9: the one used at 1
  // goes after the spare copy used at 3, and the one used at 2 ties with
  // the spare copy used at 5 (ties keep LRU order).
  EXPECT_EQ(Evictor::LastCopyOrder(window, expendable, /*horizon=*/3),
            (std::vector<std::size_t>{2, 0, 1, 4, 3, 5}));
  // Nothing held elsewhere, or no horizon: plain LRU.
  EXPECT_EQ(Evictor::LastCopyOrder(window, std::vector<bool>(6, false), 100),
            (std::vector<std::size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(Evictor::LastCopyOrder(window, expendable, 0),
            (std::vector<std::size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(Evictor::LastCopyOrder({}, {}, 4).empty());
}

TEST(LastCopyOrder, ALastCopyUnusedForTheHorizonGoesBeforeAnythingUsedSince) {
  // The last copy used at 1, horizon 4: it goes before what was used after
  // 5, held elsewhere or not.
  const auto window = Window({1, 6, 7, 8});
  const std::vector<bool> expendable = {false, true, true, true};
  EXPECT_EQ(Evictor::LastCopyOrder(window, expendable, 4),
            (std::vector<std::size_t>{0, 1, 2, 3}));
}

// Names as expendable the keys of a set; can hold a caller inside Expendable.
class FakeBias final : public EvictionBias {
 public:
  explicit FakeBias(std::vector<ObjectKey> held_elsewhere) : held_(std::move(held_elsewhere)) {}
  std::vector<bool> Expendable(std::span<const ObjectKey> keys) const override {
    calls_.fetch_add(1);
    while (hold_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<bool> out;
    for (const ObjectKey& key : keys) {
      out.push_back(std::find(held_.begin(), held_.end(), key) != held_.end());
    }
    return out;
  }
  std::vector<ObjectKey> held_;
  mutable std::atomic<int> calls_{0};
  std::atomic<bool> hold_{false};
};

class BiasedEvictorTest : public EvictorTest {
 protected:
  // Objects 0..n-1, each admitted alone: 0 is the least recently used.
  void FillInOrder(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) Fill(1);
  }
  bool Resident(std::uint64_t n) { return table_->Find(testing::KeyN(n)).has_value(); }
};

TEST_F(BiasedEvictorTest, APassEvictsCopiesHeldElsewhereBeforeOlderLastCopies) {
  FillInOrder(17);  // 85 %: a pass frees 5 MiB, down to 60 %
  std::vector<ObjectKey> even;
  for (std::uint64_t n = 0; n < 17; n += 2) even.push_back(testing::KeyN(n));
  FakeBias bias(even);
  Evictor evictor(table_.get(), EvictorConfig{});
  evictor.SetBias(&bias, /*horizon_fraction=*/1.0);
  evictor.RunPass();
  EXPECT_EQ(allocator_->UsedBytes(), 12 * kMiB);
  // The five oldest held elsewhere went; every last copy stayed.
  for (std::uint64_t n = 0; n < 17; ++n) {
    const bool gone = n % 2 == 0 && n <= 8;
    EXPECT_EQ(Resident(n), !gone) << n;
  }
  const EvictorStats stats = evictor.Stats();
  EXPECT_EQ(stats.last_copy_checked, 17u);
  EXPECT_EQ(stats.last_copy_expendable, 9u);
  EXPECT_EQ(stats.last_copies_spared, 2u);  // of the five oldest, 1 and 3 stayed
  EXPECT_EQ(stats.evicted_objects, 5u);
}

// At a real L1's size a pass evicts far more than one small window: the
// copies held elsewhere are chosen among about twice what it evicts, not
// 256 at a time (the oldest 256 here are all last copies).
TEST_F(EvictorTest, APassChoosesAmongAboutTwiceWhatItEvicts) {
  constexpr std::size_t kObjects = 1100;  // 17.2 MiB of 20: a pass frees 332 of them
  FillSmall(kObjects);
  std::vector<ObjectKey> held_elsewhere;  // all but the 300 oldest
  for (std::uint64_t n = 300; n < kObjects; ++n) held_elsewhere.push_back(testing::KeyN(n));
  FakeBias bias(held_elsewhere);
  Evictor evictor(table_.get(), EvictorConfig{});
  evictor.SetBias(&bias, 10);
  evictor.RunPass();
  EXPECT_LE(allocator_->UsedBytes(), 12 * kMiB);
  const EvictorStats stats = evictor.Stats();
  EXPECT_GE(stats.evicted_objects, 332u);
  for (std::uint64_t n = 0; n < 300; ++n) {
    ASSERT_TRUE(table_->Find(testing::KeyN(n)).has_value()) << n;
  }
  EXPECT_EQ(stats.last_copies_spared, 300u);
  EXPECT_GE(stats.last_copy_checked, 2 * 332u);
}

// Rounds of a small window evict from the first half of each, the rest
// staying oldest for the next: with an order that changes nothing, exactly
// what plain LRU evicts.
TEST_F(EvictorTest, SmallReorderedRoundsWithNothingReorderedAreLru) {
  FillSmall(1100);
  std::size_t rounds = 0;
  const auto same_order = [&rounds](std::span<const UsedCandidate> window, std::size_t) {
    rounds += 1;
    std::vector<ObjectKey> keys;
    for (const UsedCandidate& c : window) keys.push_back(c.key);
    return keys;
  };
  std::vector<ObjectKey> evicted;
  const EvictionReport report = table_->EvictReordered(332 * kSmallObject, same_order, &evicted, 64);
  EXPECT_EQ(report.objects, 332u);
  ASSERT_EQ(evicted.size(), 332u);
  for (std::uint64_t n = 0; n < 332; ++n) EXPECT_EQ(evicted[n], testing::KeyN(n)) << n;
  EXPECT_EQ(rounds, 11u);  // 32 a round
}

TEST(ReorderWindow, TwiceTheObjectsABatchTakesPlusTheMinimumAndCapped) {
  // 10 MiB of 100 MiB held by 1000 objects: about 100 objects.
  EXPECT_EQ(ObjectTable::ReorderWindow(10 << 20, 100 << 20, 1000),
            2 * 100 + ObjectTable::kMinReorderWindow);
  EXPECT_EQ(ObjectTable::ReorderWindow(1, 0, 0), ObjectTable::kMinReorderWindow);
  EXPECT_EQ(ObjectTable::ReorderWindow(1ull << 40, 1ull << 40, 10'000'000),
            ObjectTable::kMaxReorderWindow);
}

TEST_F(BiasedEvictorTest, TheBiasIsBoundedByTheHorizon) {
  FillInOrder(17);  // object n last used at use n + 1
  FakeBias bias({testing::KeyN(6), testing::KeyN(15), testing::KeyN(16)});
  Evictor evictor(table_.get(), EvictorConfig{});
  // 17 resident x 0.25: a horizon of 4 uses. Ranks: last copies n + 5, the
  // spare copies n + 1 (7, 16, 17). Five go: 0 (5), 1 (6), 2 (7), 6 (7),
  // 3 (8). The spare copies used long after (15, 16) stay.
  evictor.SetBias(&bias, 0.25);
  evictor.RunPass();
  for (std::uint64_t n = 0; n < 17; ++n) {
    const bool gone = n <= 3 || n == 6;
    EXPECT_EQ(Resident(n), !gone) << n;
  }
  EXPECT_EQ(evictor.Stats().last_copies_spared, 1u);  // of the five oldest, 4 stayed
}

TEST_F(BiasedEvictorTest, WithoutABiasAPassIsPlainLru) {
  FillInOrder(17);
  FakeBias bias({testing::KeyN(16)});
  Evictor evictor(table_.get(), EvictorConfig{});
  evictor.SetBias(&bias, 1.0);
  evictor.SetBias(nullptr, 1.0);
  evictor.RunPass();
  for (std::uint64_t n = 0; n < 17; ++n) EXPECT_EQ(Resident(n), n >= 5) << n;
  EXPECT_EQ(bias.calls_.load(), 0);
  EXPECT_EQ(evictor.Stats().last_copy_checked, 0u);
}

// The server removes its bias before the directory behind it goes: the
// removal must wait for a pass that is using it.
TEST_F(BiasedEvictorTest, RemovingTheBiasWaitsForThePassUsingIt) {
  FillInOrder(17);
  FakeBias bias({});
  bias.hold_ = true;
  Evictor evictor(table_.get(), EvictorConfig{});
  evictor.SetBias(&bias, 1.0);
  std::thread pass([&] { evictor.RunPass(); });
  WaitUntil([&] { return bias.calls_.load() > 0; });
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    evictor.SetBias(nullptr, 0);
    removed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(removed.load());  // the pass is still asking the bias
  bias.hold_ = false;
  pass.join();
  remover.join();
  EXPECT_TRUE(removed.load());
  EXPECT_EQ(allocator_->UsedBytes(), 12 * kMiB);
}

}  // namespace
}  // namespace lmcache::store
