// Health: serving, every watched loop beating, every readiness condition met.
#include "admin_http/health.h"

#include <gtest/gtest.h>

#include <atomic>

#include "fakes/fake_clock.h"

namespace lmcache::admin_http {
namespace {

TEST(HealthTest, StartingAndDrainingAreUnhealthyWithThePhaseAsReason) {
  testing::FakeClock clock;
  Health health(&clock);
  EXPECT_FALSE(health.Check().healthy);
  EXPECT_EQ(health.Check().reason, "starting");
  health.SetPhase(Phase::kServing);
  EXPECT_TRUE(health.Check().healthy);
  health.SetPhase(Phase::kDraining);
  EXPECT_EQ(health.Check().reason, "draining");
}

TEST(HealthTest, AWedgedLoopFailsTheCheckAndRecoversWhenItBeatsAgain) {
  testing::FakeClock clock;
  Health health(&clock);
  std::atomic<TimeMs> beat{0};
  health.Watch("the request loop", [&beat] { return beat.load(); }, 10'000);
  health.SetPhase(Phase::kServing);
  EXPECT_TRUE(health.Check().healthy);  // not beaten yet: counted from serving
  clock.Advance(10'001);
  EXPECT_FALSE(health.Check().healthy);  // never beat since serving began
  beat = clock.NowMs();
  EXPECT_TRUE(health.Check().healthy);
  clock.Advance(25'000);
  const HealthVerdict wedged = health.Check();
  EXPECT_FALSE(wedged.healthy);
  EXPECT_EQ(wedged.reason, "the request loop has made no progress for 25 s");
  beat = clock.NowMs();
  EXPECT_TRUE(health.Check().healthy);
}

TEST(HealthTest, ReadinessConditionsGiveTheirReason) {
  testing::FakeClock clock;
  Health health(&clock);
  bool prefaulted = false;
  health.Require([&prefaulted]() -> std::optional<std::string> {
    if (prefaulted) return std::nullopt;
    return "pre-faulting the pool: 40% of 100% needed";
  });
  health.SetPhase(Phase::kServing);
  EXPECT_EQ(health.Check().reason, "pre-faulting the pool: 40% of 100% needed");
  prefaulted = true;
  EXPECT_TRUE(health.Check().healthy);
}

}  // namespace
}  // namespace lmcache::admin_http
