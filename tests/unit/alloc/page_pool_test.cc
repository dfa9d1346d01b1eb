#include "alloc/page_pool.h"

#include <gtest/gtest.h>

namespace lmcache::alloc {
namespace {

TEST(PagePool, TakesBestFitAndCoalescesOnGive) {
  PagePool pool(100, 100);
  EXPECT_EQ(pool.free_pages(), 100u);
  auto a = pool.Take(10);
  auto b = pool.Take(20);
  auto c = pool.Take(30);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 10u);
  EXPECT_EQ(*c, 30u);
  EXPECT_EQ(pool.free_pages(), 40u);
  pool.Give(*b, 20);  // hole of 20 at 10; tail of 40 at 60
  EXPECT_EQ(pool.run_count(), 2u);
  auto d = pool.Take(15);  // best fit: the 20-page hole, not the 40-page tail
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, 10u);
  pool.Give(*d, 15);
  pool.Give(*a, 10);
  pool.Give(*c, 30);
  EXPECT_EQ(pool.run_count(), 1u);
  EXPECT_EQ(pool.largest_run(), 100u);
}

TEST(PagePool, RefusesRunsLongerThanAnyFreeRun) {
  PagePool pool(8, 8);
  auto a = pool.Take(3);
  auto b = pool.Take(2);
  ASSERT_TRUE(a && b);
  pool.Give(*a, 3);  // free: [0,3) and [5,8): 6 pages, but no run of 4
  EXPECT_EQ(pool.free_pages(), 6u);
  EXPECT_FALSE(pool.Take(4));
  EXPECT_FALSE(pool.Take(0));
  EXPECT_TRUE(pool.Take(3));
}

TEST(PagePool, OnlyReadyPagesAreHandedOutUntilTheRestIsGiven) {
  PagePool pool(10, 4);
  EXPECT_EQ(pool.free_pages(), 4u);
  EXPECT_FALSE(pool.Take(5));
  auto a = pool.Take(4);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, 0u);
  pool.Give(4, 6);  // pre-faulted now
  auto b = pool.Take(6);
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, 4u);
}

TEST(PagePool, TakeAtTakesExactlyThatRangeOrNothing) {
  PagePool pool(10, 10);
  EXPECT_TRUE(pool.TakeAt(3, 2));  // splits [0,10) into [0,3) and [5,10)
  EXPECT_EQ(pool.free_pages(), 8u);
  EXPECT_EQ(pool.run_count(), 2u);
  EXPECT_FALSE(pool.TakeAt(4, 1));   // taken already
  EXPECT_FALSE(pool.TakeAt(2, 2));   // straddles a taken page
  EXPECT_FALSE(pool.TakeAt(9, 2));   // past the end
  EXPECT_FALSE(pool.TakeAt(0, 0));
  EXPECT_EQ(pool.free_pages(), 8u);  // refusals took nothing
  EXPECT_TRUE(pool.TakeAt(0, 3));    // a whole run
  EXPECT_TRUE(pool.TakeAt(9, 1));    // a run's tail
  EXPECT_EQ(pool.free_pages(), 4u);
  pool.Give(3, 2);
  auto run = pool.Take(6);  // [3,9) coalesced again
  ASSERT_TRUE(run);
  EXPECT_EQ(*run, 3u);
}

}  // namespace
}  // namespace lmcache::alloc
