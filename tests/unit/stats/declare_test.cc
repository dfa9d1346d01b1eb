// stats/declare.h and stats/sources.h: one figure list makes the struct, its
// atomics, their copy and the schema rows, in list order, with nothing
// missed or added; sources fill a snapshot in the order they registered.
#include "stats/declare.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "stats/sources.h"

namespace lmcache::stats {
namespace {

#define LMC_TEST_WIDGET_STATS(X, D)                                                      \
  X(made, "widgets_made", std::uint64_t, kCounter, "widgets", "widgets_made_total",      \
    "Widgets made.", {}, kEverywhere, {}, kReference)                                    \
  X(queued, "queued", std::uint64_t, kGauge, "widgets", "widget_queue", "Waiting now.")  \
  D(MadePerQueued(), "made_per_queued", kGauge, "ratio", "widget_ratio", "A ratio.", {}, \
    kPrometheusOnly)                                                                     \
  X(broken, "broken", std::uint64_t, kCounter, "widgets", "widgets_total", "Widgets by fate.", \
    {"fate", "broken"})                                                                  \
  X(load, "load", double, kGauge, "ratio", "widget_load", "How busy.")                   \
  X(open, "open", bool, kGauge, "bool", "widget_open", "Open or not.")

struct WidgetStats {
  LMC_STATS_MEMBERS(LMC_TEST_WIDGET_STATS)
  std::uint64_t not_exported = 7;
  double MadePerQueued() const { return queued ? static_cast<double>(made) / queued : 0; }
};
LMC_STATS_COUNTERS(WidgetAtomics, WidgetStats, LMC_TEST_WIDGET_STATS);
LMC_STATS_COUNTED(WidgetCounted, WidgetStats, LMC_TEST_WIDGET_STATS);
LMC_STATS_ROWS(WidgetRows, WidgetStats, LMC_TEST_WIDGET_STATS)

TEST(StatsDeclareTest, TheListMakesTheMembersZeroedAndLeavesTheOthersAlone) {
  const WidgetStats s;
  EXPECT_EQ(s.made, 0u);
  EXPECT_EQ(s.queued, 0u);
  EXPECT_EQ(s.broken, 0u);
  EXPECT_EQ(s.load, 0.0);
  EXPECT_FALSE(s.open);
  EXPECT_EQ(s.not_exported, 7u);
}

TEST(StatsDeclareTest, EveryMemberIsCountedAndCopiedByTheAtomics) {
  WidgetAtomics atomics;
  atomics.made.fetch_add(3);
  atomics.queued.store(4);
  atomics.broken.fetch_add(5);
  atomics.load.store(0.5);
  atomics.open.store(true);
  WidgetStats s;
  atomics.CopyTo(&s);
  EXPECT_EQ(s.made, 3u);
  EXPECT_EQ(s.queued, 4u);
  EXPECT_EQ(s.broken, 5u);
  EXPECT_EQ(s.load, 0.5);
  EXPECT_TRUE(s.open);
  EXPECT_EQ(s.not_exported, 7u);
}

TEST(StatsDeclareTest, CountedHoldsTheCountersOnlyAndLeavesTheGaugesToTheComponent) {
  WidgetCounted counted;
  counted.made.fetch_add(2);
  counted.broken.fetch_add(9);
  WidgetStats s;
  s.queued = 11;  // measured by the component
  s.load = 0.25;
  counted.CopyTo(&s);
  EXPECT_EQ(s.made, 2u);
  EXPECT_EQ(s.broken, 9u);
  EXPECT_EQ(s.queued, 11u);
  EXPECT_EQ(s.load, 0.25);
  // Only the two counters are atomics: the struct is two of them wide.
  EXPECT_EQ(sizeof(WidgetCounted), 2 * sizeof(std::atomic<std::uint64_t>));
}

TEST(StatsDeclareTest, TheRowsAreTheListInOrderWithTheirFieldsAndValues) {
  WidgetStats s;
  s.made = 6;
  s.queued = 3;
  s.broken = 1;
  s.load = 0.75;
  s.open = true;
  const auto rows = WidgetRows();
  ASSERT_EQ(rows.size(), 6u);
  std::vector<std::string> keys;
  for (const auto& row : rows) keys.emplace_back(row.field.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"widgets_made", "queued", "made_per_queued", "broken",
                                            "load", "open"}));
  EXPECT_EQ(rows[0].field.kind, Kind::kCounter);
  EXPECT_EQ(rows[0].field.metric, "widgets_made_total");
  EXPECT_TRUE(rows[0].field.reference);
  EXPECT_EQ(rows[1].field.reach, Reach::kEverywhere);
  EXPECT_FALSE(rows[1].field.reference);
  EXPECT_EQ(rows[2].field.reach, Reach::kPrometheusOnly);
  EXPECT_EQ(rows[3].field.label.name, "fate");
  EXPECT_EQ(rows[3].field.label.value, "broken");
  EXPECT_EQ(std::get<std::uint64_t>(rows[0].get(s)), 6u);
  EXPECT_EQ(std::get<double>(rows[2].get(s)), 2.0);
  EXPECT_EQ(std::get<double>(rows[4].get(s)), 0.75);
  EXPECT_TRUE(std::get<bool>(rows[5].get(s)));
}

#define LMC_TEST_TIMED_STATS(X, D)                                                        \
  X(calls, "calls", std::uint64_t, kCounter, "calls", "timed_calls_total", "Calls made.")  \
  X(waiting, "waiting", std::uint64_t, kGauge, "calls", "timed_waiting", "Waiting now.")   \
  X(latency, "latency", LatencyHistogram::Snapshot, kHistogram, "µs", "timed_seconds",    \
    "How long a call took.")

struct TimedStats {
  LMC_STATS_MEMBERS(LMC_TEST_TIMED_STATS)
};
LMC_STATS_COUNTERS(TimedLive, TimedStats, LMC_TEST_TIMED_STATS);
LMC_STATS_COUNTED(TimedCounted, TimedStats, LMC_TEST_TIMED_STATS);

#define LMC_TEST_PREFIX_STATS(X, D)                                                       \
  X(reachable, "reachable", std::uint64_t, kGauge, "prefixes", "prefix_reachable", "Up.") \
  X(failures, "failures", std::uint64_t, kCounter, "calls", "prefix_failures_total", "")  \
  X(load, "load", double, kGauge, "ratio", "prefix_load", "How busy.")

struct PrefixStats {
  LMC_STATS_MEMBERS(LMC_TEST_PREFIX_STATS)
  std::uint64_t not_exported = 7;
};
LMC_STATS_SUM(AddPrefixStats, PrefixStats, LMC_TEST_PREFIX_STATS)

TEST(StatsDeclareTest, AHistogramIsCountedByALatencyHistogramAndCopiedAsItsSnapshot) {
  TimedLive live;
  live.calls.fetch_add(2);
  live.waiting.store(1);
  live.latency.Record(40);      // the first bucket (<= 50 us)
  live.latency.Record(20'000);  // <= 25 ms
  TimedStats s;
  live.CopyTo(&s);
  EXPECT_EQ(s.calls, 2u);
  EXPECT_EQ(s.waiting, 1u);
  EXPECT_EQ(s.latency.count, 2u);
  EXPECT_EQ(s.latency.sum_us, 20'040u);
  EXPECT_EQ(s.latency.buckets[0], 1u);
}

TEST(StatsDeclareTest, CountedTakesTheHistogramsTooAndAddToAddsWhatTwoComponentsCounted) {
  TimedCounted first;
  TimedCounted second;
  first.calls.fetch_add(3);
  first.latency.Record(40);
  second.calls.fetch_add(4);
  second.latency.Record(60);  // the second bucket (<= 100 us)
  TimedStats s;
  s.waiting = 5;  // measured by the component: neither touches it
  first.CopyTo(&s);
  second.AddTo(&s);
  EXPECT_EQ(s.calls, 7u);
  EXPECT_EQ(s.waiting, 5u);
  EXPECT_EQ(s.latency.count, 2u);
  EXPECT_EQ(s.latency.sum_us, 100u);
  EXPECT_EQ(s.latency.buckets[0], 1u);
  EXPECT_EQ(s.latency.buckets[1], 1u);
}

TEST(StatsDeclareTest, TheSumAddsEveryMemberOfTheListAndNothingElse) {
  PrefixStats total;
  PrefixStats part;
  part.reachable = 1;
  part.failures = 3;
  part.load = 0.25;
  part.not_exported = 100;
  AddPrefixStats(&total, part);
  AddPrefixStats(&total, part);
  EXPECT_EQ(total.reachable, 2u);
  EXPECT_EQ(total.failures, 6u);
  EXPECT_EQ(total.load, 0.5);
  EXPECT_EQ(total.not_exported, 7u) << "not on the list: left alone";
}

struct Snapshot {
  std::vector<std::string> filled_by;
  int value = 0;
};

TEST(StatsSourcesTest, FillsInRegistrationOrderAndASecondRegistrationReplacesTheFirst) {
  Sources<Snapshot> sources;
  sources.Add("a", [](Snapshot* s) { s->filled_by.push_back("a"); });
  sources.Add("b", [](Snapshot* s) {
    s->filled_by.push_back("b");
    s->value = 1;
  });
  sources.Add("a", [](Snapshot* s) { s->filled_by.push_back("a2"); });
  Snapshot s;
  sources.Fill(&s);
  EXPECT_EQ(s.filled_by, (std::vector<std::string>{"a2", "b"}));
  EXPECT_EQ(s.value, 1);
  EXPECT_EQ(sources.Names(), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace lmcache::stats
