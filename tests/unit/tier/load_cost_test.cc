// LoadCostMeter and BestPrefix (tier/load_cost.h): the cost of one object of
// a load follows the calls' durations, and the prefix worth loading is the
// one that saves the most time against recomputing.
#include "tier/load_cost.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace lmcache::tier {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
// A fixed time line: the meter takes the time from its caller.
const LoadCostMeter::Clock::time_point kT0{seconds(1000)};

TEST(LoadCostMeter, NothingIsKnownBeforeTheFirstLoad) {
  LoadCostMeter meter;
  EXPECT_FALSE(meter.SecondsPerObject(kT0).has_value());
  meter.Record(0, milliseconds(5), kT0);  // a call that loaded nothing says nothing
  EXPECT_FALSE(meter.SecondsPerObject(kT0).has_value());
}

TEST(LoadCostMeter, TheFirstCallSetsTheCostAndLaterOnesMoveItAFifthOfTheWay) {
  LoadCostMeter meter;
  meter.Record(4, milliseconds(40), kT0);  // 10 ms an object
  EXPECT_DOUBLE_EQ(*meter.SecondsPerObject(kT0), 0.010);
  meter.Record(1, milliseconds(60), kT0);  // 60 ms: 10 + 0.2 x 50
  EXPECT_NEAR(*meter.SecondsPerObject(kT0), 0.020, 1e-12);
  // A tier that became fast again is trusted again within some calls.
  for (int i = 0; i < 40; ++i) meter.Record(8, milliseconds(8), kT0);  // 0.8^40 of the gap left
  EXPECT_NEAR(*meter.SecondsPerObject(kT0), 0.001, 1e-5);
}

// A tier the policy declines is never loaded from, so never measured: the
// figure goes stale kStale after the last load, the next prefetch loads
// (nothing known), and that load measures the tier afresh.
TEST(LoadCostMeter, AFigureGoesStaleSoADeclinedTierIsTriedAgain) {
  LoadCostMeter meter;
  meter.Record(1, milliseconds(100), kT0);
  EXPECT_TRUE(meter.SecondsPerObject(kT0 + LoadCostMeter::kStale - milliseconds(1)).has_value());
  EXPECT_FALSE(meter.SecondsPerObject(kT0 + LoadCostMeter::kStale).has_value());
  const auto later = kT0 + LoadCostMeter::kStale + seconds(1);
  meter.Record(1, milliseconds(1), later);  // the tier got fast: measured afresh, not from 100 ms
  EXPECT_DOUBLE_EQ(*meter.SecondsPerObject(later), 0.001);
  meter.Record(1, milliseconds(6), later);  // and averaged from there
  EXPECT_NEAR(*meter.SecondsPerObject(later), 0.002, 1e-12);
}

TEST(LoadCostMeter, DeclinedChunksAreCounted) {
  LoadCostMeter meter;
  meter.CountDeclined(3);
  meter.CountDeclined(2);
  EXPECT_EQ(meter.declined(), 5u);
}

TEST(BestPrefix, AllWhenLoadingIsCheaperNoneWhenItIsDearer) {
  const std::vector<double> fast(5, 0.001);
  EXPECT_EQ(BestPrefix(fast, 0.01), 5u);
  const std::vector<double> slow(5, 0.1);
  EXPECT_EQ(BestPrefix(slow, 0.01), 0u);
  EXPECT_EQ(BestPrefix({}, 0.01), 0u);
}

TEST(BestPrefix, ASlowChunkAmongFastOnesLoadsWhenTheRestMakeUpForIt) {
  // Saved per chunk: +9, -10, +9, +9, +9 ms: the whole prompt saves the most.
  EXPECT_EQ(BestPrefix(std::vector<double>{0.001, 0.02, 0.001, 0.001, 0.001}, 0.01), 5u);
  // +9, -90, +9, +9, +9: the slow chunk costs more than the rest saves.
  EXPECT_EQ(BestPrefix(std::vector<double>{0.001, 0.1, 0.001, 0.001, 0.001}, 0.01), 1u);
}

TEST(BestPrefix, ATieLoads) {
  EXPECT_EQ(BestPrefix(std::vector<double>{0.01, 0.01}, 0.01), 2u);
}

}  // namespace
}  // namespace lmcache::tier
