#include "common/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

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

}  // namespace
}  // namespace lmcache
