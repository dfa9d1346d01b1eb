#include "alloc/slab_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include "fakes/aligned_buffer.h"

namespace lmcache::alloc {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

class SlabAllocatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<SlabAllocator> Make(std::uint64_t bytes, SlabAllocatorConfig config = {}) {
    buffer_ = std::make_unique<testing::AlignedBuffer>(bytes);
    auto result = SlabAllocator::Create(buffer_->span(), config);
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    return std::move(result).value();
  }
  std::unique_ptr<testing::AlignedBuffer> buffer_;
};

TEST_F(SlabAllocatorTest, RejectsInvalidConfig) {
  testing::AlignedBuffer buffer(16 * kMiB);
  SlabAllocatorConfig bad_align;
  bad_align.align_bytes = 3000;
  EXPECT_EQ(SlabAllocator::Create(buffer.span(), bad_align).status().code(),
            ErrorCode::kInvalidConfig);
  SlabAllocatorConfig bad_page;
  bad_page.page_bytes = 4096 * 3 + 1;
  EXPECT_EQ(SlabAllocator::Create(buffer.span(), bad_page).status().code(),
            ErrorCode::kInvalidConfig);
  EXPECT_EQ(SlabAllocator::Create(buffer.span().subspan(64), SlabAllocatorConfig{}).status().code(),
            ErrorCode::kInvalidArgument);
}

TEST_F(SlabAllocatorTest, OffsetsAreAlignedDistinctAndInBounds) {
  auto a = Make(64 * kMiB);
  std::set<Offset> seen;
  for (int i = 0; i < 100; ++i) {
    auto off = a->Allocate(10'000);  // rounds to 12 KiB
    ASSERT_TRUE(off.ok());
    EXPECT_EQ(*off % 4096, 0u);
    EXPECT_TRUE(seen.insert(*off).second);
    EXPECT_TRUE(a->Resolve(*off, 10'000).ok());
    EXPECT_EQ(*a->ObjectSize(*off), 12'288u);
  }
  EXPECT_EQ(a->UsedBytes(), 100u * 12'288);
}

TEST_F(SlabAllocatorTest, BytesWrittenToOneObjectDoNotTouchAnother) {
  auto a = Make(32 * kMiB);
  auto offsets = a->AllocateBatch(256 * 1024, 20);
  ASSERT_TRUE(offsets.ok());
  for (std::size_t i = 0; i < offsets->size(); ++i) {
    std::byte* p = *a->Resolve((*offsets)[i], 256 * 1024);
    std::fill_n(p, 256 * 1024, static_cast<std::byte>(i + 1));
  }
  for (std::size_t i = 0; i < offsets->size(); ++i) {
    const std::byte* p = *a->Resolve((*offsets)[i], 256 * 1024);
    EXPECT_TRUE(std::all_of(p, p + 256 * 1024,
                            [i](std::byte b) { return b == static_cast<std::byte>(i + 1); }));
  }
}

TEST_F(SlabAllocatorTest, BatchIsAllOrNothing) {
  auto a = Make(64 * kMiB);  // 32 pages of 2 MiB
  auto first = a->AllocateBatch(8 * kMiB, 6);
  ASSERT_TRUE(first.ok());
  const AllocatorStats before = a->Stats();
  auto too_many = a->AllocateBatch(8 * kMiB, 3);  // only 2 fit
  EXPECT_EQ(too_many.status().code(), ErrorCode::kOutOfMemory);
  const AllocatorStats after = a->Stats();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.pool_free_bytes, before.pool_free_bytes);
  EXPECT_EQ(after.failed_allocations, before.failed_allocations + 1);
  EXPECT_TRUE(a->AllocateBatch(8 * kMiB, 2).ok());
}

TEST_F(SlabAllocatorTest, FailedBatchOfNewClassLeavesNoClassBehind) {
  auto a = Make(16 * kMiB);
  EXPECT_FALSE(a->AllocateBatch(5 * kMiB, 4).ok());
  EXPECT_TRUE(a->Stats().classes.empty());
  EXPECT_EQ(a->Stats().pool_free_bytes, 16 * kMiB);
}

TEST_F(SlabAllocatorTest, EmptySlabReturnsToPoolForAnotherClass) {
  auto a = Make(64 * kMiB);
  auto small = a->AllocateBatch(1 * kMiB, 64);  // fills the pool with 1 MiB objects
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(a->Allocate(32 * kMiB).status().code(), ErrorCode::kOutOfMemory);
  ASSERT_TRUE(a->FreeBatch(*small).ok());
  EXPECT_EQ(a->UsedBytes(), 0u);
  EXPECT_EQ(a->Stats().pool_free_bytes, 64 * kMiB);
  EXPECT_TRUE(a->Stats().classes.empty());
  auto big = a->AllocateBatch(32 * kMiB, 2);  // the same memory, now as 32 MiB chunks
  EXPECT_TRUE(big.ok());
}

TEST_F(SlabAllocatorTest, FreeRejectsForeignOffsetsAndDoubleFree) {
  auto a = Make(16 * kMiB);
  auto off = a->Allocate(64 * 1024);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(a->Free(*off + 4096).code(), ErrorCode::kInvalidArgument);  // inside, not a start
  EXPECT_EQ(a->Free(1ull << 40).code(), ErrorCode::kInvalidArgument);   // outside the span
  EXPECT_TRUE(a->Free(*off).ok());
  EXPECT_EQ(a->Free(*off).code(), ErrorCode::kInvalidArgument);  // double free
  EXPECT_EQ(a->UsedBytes(), 0u);
}

TEST_F(SlabAllocatorTest, ResolveBoundsChecks) {
  auto a = Make(16 * kMiB);
  EXPECT_TRUE(a->Resolve(0, 16 * kMiB).ok());
  EXPECT_FALSE(a->Resolve(1, 16 * kMiB).ok());
  EXPECT_FALSE(a->Resolve(16 * kMiB + 1, 0).ok());
  EXPECT_FALSE(a->Resolve(UINT64_MAX, 2).ok());
}

TEST_F(SlabAllocatorTest, ObjectsLargerThanASlabTargetGetTheirOwnSlab) {
  SlabAllocatorConfig config;
  config.slab_target_bytes = 16 * kMiB;
  auto a = Make(128 * kMiB, config);
  auto offsets = a->AllocateBatch(40 * kMiB, 3);  // 20 pages each
  ASSERT_TRUE(offsets.ok());
  const AllocatorStats stats = a->Stats();
  ASSERT_EQ(stats.classes.size(), 1u);
  EXPECT_EQ(stats.classes[0].objects_per_slab, 1u);
  EXPECT_EQ(stats.classes[0].slabs, 3u);
  EXPECT_EQ(stats.used_bytes, 120 * kMiB);
  EXPECT_EQ(stats.pool_free_bytes, 8 * kMiB);
}

TEST_F(SlabAllocatorTest, StatsReportClassesSlackAndLargestAllocatable) {
  auto a = Make(256 * kMiB);
  ASSERT_TRUE(a->AllocateBatch(32 * kMiB, 1).ok());  // a 64 MiB slab with one free slot
  ASSERT_TRUE(a->AllocateBatch(3 * kMiB, 1).ok());
  const AllocatorStats stats = a->Stats();
  EXPECT_EQ(stats.capacity_bytes, 256 * kMiB);
  EXPECT_EQ(stats.used_bytes, 35 * kMiB);
  EXPECT_EQ(stats.free_bytes, 221 * kMiB);
  ASSERT_EQ(stats.classes.size(), 2u);
  EXPECT_EQ(stats.classes[0].object_bytes, 3 * kMiB);
  EXPECT_EQ(stats.classes[1].object_bytes, 32 * kMiB);
  EXPECT_EQ(stats.classes[1].free_objects, 1u);
  EXPECT_EQ(stats.slab_slack_bytes, stats.free_bytes - stats.pool_free_bytes);
  EXPECT_EQ(stats.largest_allocatable_bytes, stats.largest_free_run_bytes);
  EXPECT_GE(stats.largest_allocatable_bytes, 32 * kMiB);
  EXPECT_EQ(stats.fragmentation, 0.0);
}

TEST_F(SlabAllocatorTest, FragmentationGrowsWithHoles) {
  SlabAllocatorConfig config;
  config.slab_target_bytes = 2 * kMiB;  // one page per slab
  auto a = Make(32 * kMiB, config);
  auto all = a->AllocateBatch(2 * kMiB, 16);
  ASSERT_TRUE(all.ok());
  for (std::size_t i = 0; i < all->size(); i += 2) ASSERT_TRUE(a->Free((*all)[i]).ok());
  const AllocatorStats stats = a->Stats();
  EXPECT_EQ(stats.pool_free_bytes, 16 * kMiB);
  EXPECT_EQ(stats.largest_free_run_bytes, 2 * kMiB);
  EXPECT_NEAR(stats.fragmentation, 1.0 - 2.0 / 16.0, 1e-9);
  EXPECT_EQ(a->Allocate(4 * kMiB).status().code(), ErrorCode::kOutOfMemory);
}

TEST_F(SlabAllocatorTest, PoolSmallerThanASlabStillServesObjects) {
  auto a = Make(16 * kMiB);  // the 64 MiB slab target does not fit: slabs shrink
  auto offsets = a->AllocateBatch(5 * kMiB, 3);
  ASSERT_TRUE(offsets.ok()) << offsets.status().ToString();
  EXPECT_EQ(a->UsedBytes(), 15 * kMiB);
  ASSERT_TRUE(a->FreeBatch(*offsets).ok());
  EXPECT_EQ(a->Stats().pool_free_bytes, 16 * kMiB);
}

TEST_F(SlabAllocatorTest, TooManyDistinctSizesIsResourceExhausted) {
  SlabAllocatorConfig config;
  config.max_classes = 2;
  config.slab_target_bytes = 2 * kMiB;
  auto a = Make(64 * kMiB, config);
  ASSERT_TRUE(a->Allocate(4096).ok());
  ASSERT_TRUE(a->Allocate(8192).ok());
  EXPECT_EQ(a->Allocate(3 * 4096).status().code(), ErrorCode::kResourceExhausted);
}

TEST_F(SlabAllocatorTest, ZeroSizeAndOversizedRequestsFail) {
  auto a = Make(16 * kMiB);
  EXPECT_EQ(a->Allocate(0).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(a->Allocate(17 * kMiB).status().code(), ErrorCode::kOutOfMemory);
  auto none = a->AllocateBatch(4096, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(SlabAllocatorTest, OnlyReadyPagesAreHandedOutAndMakeReadyAddsTheRest) {
  testing::AlignedBuffer buffer(16 * kMiB);
  SlabAllocatorConfig config;
  config.slab_target_bytes = 2 * kMiB;
  auto allocator = std::move(SlabAllocator::Create(buffer.span(), config, 4 * kMiB)).value();
  EXPECT_EQ(allocator->capacity_bytes(), 16 * kMiB);
  EXPECT_EQ(allocator->ready_bytes(), 4 * kMiB);
  EXPECT_EQ(allocator->Stats().unready_bytes, 12 * kMiB);
  auto first = allocator->AllocateBatch(kMiB, 4);
  ASSERT_TRUE(first.ok());
  for (const Offset o : *first) EXPECT_LT(o, 4 * kMiB);  // never an untouched page
  EXPECT_EQ(allocator->Allocate(kMiB).status().code(), ErrorCode::kOutOfMemory);
  allocator->MakeReady(9 * kMiB);  // whole pages only: 8 MiB
  EXPECT_EQ(allocator->ready_bytes(), 8 * kMiB);
  auto more = allocator->AllocateBatch(kMiB, 4);
  ASSERT_TRUE(more.ok());
  for (const Offset o : *more) EXPECT_LT(o, 8 * kMiB);
  allocator->MakeReady(2 * kMiB);  // never shrinks
  EXPECT_EQ(allocator->ready_bytes(), 8 * kMiB);
  allocator->MakeReady(16 * kMiB);
  EXPECT_EQ(allocator->Stats().unready_bytes, 0u);
  EXPECT_TRUE(allocator->AllocateBatch(kMiB, 8).ok());
}

TEST_F(SlabAllocatorTest, WaitersForReadyPagesWakeOnGrowthAndStopWhenGrowthStops) {
  testing::AlignedBuffer buffer(16 * kMiB);
  auto allocator = std::move(SlabAllocator::Create(buffer.span(), {}, 4 * kMiB)).value();
  std::thread grower([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    allocator->MakeReady(8 * kMiB);
  });
  EXPECT_TRUE(allocator->WaitReadyBeyond(4 * kMiB, std::chrono::seconds(30)));
  grower.join();
  EXPECT_FALSE(allocator->WaitReadyBeyond(8 * kMiB, std::chrono::milliseconds(10)));  // timed out
  allocator->StopGrowing();
  constexpr auto kWait = std::chrono::seconds(30);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(allocator->WaitReadyBeyond(8 * kMiB, kWait));
  // It returned because growth stopped, not because the wait timed out.
  EXPECT_LT(std::chrono::steady_clock::now() - start, kWait / 2);
}

// The non-blocking form (a parked store's waker): called once, at once when
// pages came already, else by the MakeReady that brings them or the
// StopGrowing that says none will.
TEST_F(SlabAllocatorTest, ReadyPageNotificationsComeOnceFromWhateverEndsTheWait) {
  testing::AlignedBuffer buffer(16 * kMiB);
  auto allocator = std::move(SlabAllocator::Create(buffer.span(), {}, 4 * kMiB)).value();
  EXPECT_TRUE(allocator->growing());
  int early = 0, grown = 0, stopped = 0;
  allocator->NotifyWhenReadyBeyond(2 * kMiB, [&] { ++early; });  // beyond already
  EXPECT_EQ(early, 1);
  allocator->NotifyWhenReadyBeyond(4 * kMiB, [&] { ++grown; });
  allocator->NotifyWhenReadyBeyond(8 * kMiB, [&] { ++stopped; });
  allocator->MakeReady(4 * kMiB);  // no growth: nobody woken
  EXPECT_EQ(grown, 0);
  allocator->MakeReady(8 * kMiB);
  EXPECT_EQ(grown, 1);
  EXPECT_EQ(stopped, 1) << "every waiter is woken by growth and looks again (8 MiB is not beyond 8)";
  allocator->NotifyWhenReadyBeyond(8 * kMiB, [&] { ++stopped; });
  allocator->StopGrowing();
  EXPECT_EQ(stopped, 2);
  EXPECT_FALSE(allocator->growing());
  allocator->NotifyWhenReadyBeyond(8 * kMiB, [&] { ++stopped; });  // nothing more will come
  EXPECT_EQ(stopped, 3);
  allocator->MakeReady(16 * kMiB);
  EXPECT_EQ(grown + early, 2) << "each notification comes once";
}

TEST_F(SlabAllocatorTest, RandomWorkloadKeepsAccountingExact) {
  auto a = Make(128 * kMiB);
  std::mt19937 rng(42);
  const std::uint64_t sizes[] = {4096, 300 * 1024, 1 * kMiB, 5 * kMiB + 1};
  std::vector<std::pair<Offset, std::uint64_t>> live;
  std::uint64_t expected_used = 0;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const std::uint64_t size = sizes[rng() % 4];
      auto off = a->Allocate(size);
      if (!off.ok()) continue;
      live.emplace_back(*off, a->AlignedSize(size));
      expected_used += a->AlignedSize(size);
    } else {
      const std::size_t i = rng() % live.size();
      ASSERT_TRUE(a->Free(live[i].first).ok());
      expected_used -= live[i].second;
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_EQ(a->UsedBytes(), expected_used);
  }
  // No two live objects overlap.
  std::sort(live.begin(), live.end());
  for (std::size_t i = 1; i < live.size(); ++i) {
    ASSERT_LE(live[i - 1].first + live[i - 1].second, live[i].first);
  }
  for (const auto& [off, size] : live) ASSERT_TRUE(a->Free(off).ok());
  EXPECT_EQ(a->Stats().pool_free_bytes, 128 * kMiB);
}

// A successor adopting a predecessor's pool (warm restart): the same slabs
// at the same pages, the live objects in use, nothing else.
TEST_F(SlabAllocatorTest, AdoptRebuildsThePredecessorsObjectsInPlace) {
  SlabAllocatorConfig config;
  config.slab_target_bytes = 1 * kMiB;
  auto old_a = Make(64 * kMiB, config);
  std::vector<Offset> small;
  std::vector<Offset> large;
  for (int i = 0; i < 300; ++i) small.push_back(*old_a->Allocate(10'000));
  for (int i = 0; i < 5; ++i) large.push_back(*old_a->Allocate(3 * kMiB));
  // Some die before the handover: their slots must be free in the successor,
  // and a slab left empty must go back to the pool.
  std::vector<Offset> kept;
  for (std::size_t i = 0; i < small.size(); ++i) {
    if (i % 3 == 0 || i >= 200) {
      ASSERT_TRUE(old_a->Free(small[i]).ok());
    } else {
      kept.push_back(small[i]);
    }
  }
  kept.insert(kept.end(), large.begin(), large.end());
  const std::vector<SlabRecord> slabs = old_a->Slabs();
  const AllocatorStats before = old_a->Stats();

  // The successor maps the same bytes (here: the same buffer).
  auto created = SlabAllocator::Create(buffer_->span(), config);
  ASSERT_TRUE(created.ok());
  auto next = std::move(created).value();
  ASSERT_TRUE(next->Adopt(slabs, kept).ok());
  const AllocatorStats after = next->Stats();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.pool_free_bytes, before.pool_free_bytes);
  for (const Offset offset : kept) {
    auto size = next->ObjectSize(offset);
    ASSERT_TRUE(size.ok()) << offset;
    EXPECT_EQ(*size, *old_a->ObjectSize(offset));
  }
  // New objects never land on an adopted one, and freeing works as usual.
  std::set<Offset> live(kept.begin(), kept.end());
  for (int i = 0; i < 500; ++i) {
    auto offset = next->Allocate(10'000);
    if (!offset.ok()) break;
    EXPECT_TRUE(live.insert(*offset).second) << "handed out an adopted slot " << *offset;
  }
  for (const Offset offset : live) EXPECT_TRUE(next->Free(offset).ok());
  EXPECT_EQ(next->Stats().used_bytes, 0u);
  EXPECT_EQ(next->Stats().pool_free_bytes, 64 * kMiB);
}

TEST_F(SlabAllocatorTest, AdoptRefusesRecordsThatContradictEachOtherOrTheConfig) {
  auto fresh = [this] {
    return std::move(SlabAllocator::Create(buffer_->span(), SlabAllocatorConfig{})).value();
  };
  Make(16 * kMiB);  // 8 pages of 2 MiB
  const SlabRecord good{0, 2, 12288};
  EXPECT_TRUE(fresh()->Adopt(std::vector<SlabRecord>{good}, std::vector<Offset>{12288}).ok());
  // Overlapping slabs, slabs past the pool, sizes off the alignment.
  EXPECT_FALSE(fresh()->Adopt(std::vector<SlabRecord>{good, {1, 2, 12288}}, {}).ok());
  EXPECT_FALSE(fresh()->Adopt(std::vector<SlabRecord>{{7, 2, 12288}}, {}).ok());
  EXPECT_FALSE(fresh()->Adopt(std::vector<SlabRecord>{{0, 2, 1000}}, {}).ok());
  EXPECT_FALSE(fresh()->Adopt(std::vector<SlabRecord>{{0, 0, 4096}}, {}).ok());
  // Objects off a slot, outside every slab, or named twice.
  EXPECT_FALSE(fresh()->Adopt(std::vector<SlabRecord>{good}, std::vector<Offset>{4096}).ok());
  EXPECT_FALSE(fresh()->Adopt(std::vector<SlabRecord>{good}, std::vector<Offset>{6 * 2 * kMiB}).ok());
  EXPECT_FALSE(fresh()->Adopt(std::vector<SlabRecord>{good}, std::vector<Offset>{0, 0}).ok());
  // Only a fresh allocator adopts.
  auto used = fresh();
  ASSERT_TRUE(used->Allocate(4096).ok());
  EXPECT_EQ(used->Adopt(std::vector<SlabRecord>{{4, 1, 4096}}, {}).code(), ErrorCode::kWrongState);
}

}  // namespace
}  // namespace lmcache::alloc

namespace lmcache::alloc {
namespace {

// Records what a crash-recovery journal is told (restart/pool_journal.h).
class RecordingObserver : public SlabObserver {
 public:
  void SlabAdded(const SlabRecord& slab) override { live.push_back(slab); }
  void SlabReleased(const SlabRecord& slab) override {
    released.push_back(slab);
    std::erase(live, slab);
  }
  std::vector<SlabRecord> live;
  std::vector<SlabRecord> released;
};

TEST_F(SlabAllocatorTest, AnObserverLearnsOfEverySlabAsItComesAndGoes) {
  SlabAllocatorConfig config;
  config.page_bytes = 1 * kMiB;
  config.slab_target_bytes = 2 * kMiB;
  auto a = Make(16 * kMiB, config);
  auto first = a->Allocate(1 * kMiB);  // a slab of two 1 MiB objects, before any observer
  ASSERT_TRUE(first.ok());
  RecordingObserver observer;
  a->SetSlabObserver(&observer);
  ASSERT_EQ(observer.live.size(), 1u) << "the live slabs are told at once";
  EXPECT_EQ(observer.live[0], a->Slabs()[0]);
  auto batch = a->AllocateBatch(512 * 1024, 5);  // another class: 4 per slab, so two slabs
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(observer.live.size(), 3u);
  std::vector<SlabRecord> slabs = a->Slabs();
  std::vector<SlabRecord> seen = observer.live;
  auto by_page = [](const SlabRecord& x, const SlabRecord& y) { return x.first_page < y.first_page; };
  std::sort(seen.begin(), seen.end(), by_page);
  EXPECT_EQ(seen, slabs);
  ASSERT_TRUE(a->FreeBatch(*batch).ok());
  EXPECT_EQ(observer.released.size(), 2u) << "emptied slabs go back to the pool, and say so";
  ASSERT_EQ(observer.live.size(), 1u);
  a->SetSlabObserver(nullptr);
  ASSERT_TRUE(a->Free(*first).ok());
  EXPECT_EQ(observer.released.size(), 2u) << "an unsubscribed observer hears nothing";
}

}  // namespace
}  // namespace lmcache::alloc
