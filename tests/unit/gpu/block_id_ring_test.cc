// BlockIdRing: ranges handed out first in, first out, wrapping around, never
// overlapping a range still held, refused when they do not fit.
#include "gpu/block_id_ring.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>

namespace lmcache::gpu {
namespace {

TEST(BlockIdRingTest, RangesWrapAroundAndNeverOverlapWhatIsHeld) {
  BlockIdRing ring(10);
  EXPECT_EQ(ring.Reserve(4), 0u);
  EXPECT_EQ(ring.Reserve(4), 4u);
  EXPECT_FALSE(ring.Reserve(3).has_value()) << "2 left at the end, 0 at the start";
  ring.Release(0);
  EXPECT_EQ(ring.Reserve(3), 0u) << "wrapped to the start";
  EXPECT_FALSE(ring.Reserve(2).has_value()) << "[3, 4) is free but too short; [4, 8) is held";
  EXPECT_EQ(ring.Reserve(1), 3u);
  ring.Release(4);
  ring.Release(0);
  ring.Release(3);
  EXPECT_EQ(ring.in_use(), 0u);
  EXPECT_FALSE(ring.Reserve(11).has_value());
  EXPECT_EQ(ring.Reserve(10), 0u);
}

TEST(BlockIdRingTest, RandomTrafficKeepsEveryHeldRangeDisjoint) {
  BlockIdRing ring(1000);
  std::mt19937 rng(7);
  std::deque<std::pair<std::uint64_t, std::uint64_t>> held;
  for (int step = 0; step < 20000; ++step) {
    if (!held.empty() && (rng() % 3 == 0 || held.size() > 20)) {
      ring.Release(held.front().first);
      held.pop_front();
      continue;
    }
    const std::uint64_t count = 1 + rng() % 150;
    const auto at = ring.Reserve(count);
    if (!at) continue;
    ASSERT_LE(*at + count, 1000u);
    for (const auto& [begin, n] : held) {
      ASSERT_TRUE(*at + count <= begin || begin + n <= *at) << "overlaps a held range";
    }
    held.emplace_back(*at, count);
  }
}

}  // namespace
}  // namespace lmcache::gpu
