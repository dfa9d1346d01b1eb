// KvEventLog: the reference's cursor semantics (KVEventLog.read_after in
// lmcache/v1/multiprocess/modules/kv_events.py, and the cases of its own
// test: a log of 3 records after 4 appends, model paging), the byte bound,
// and watchers.
#include "events/kv_event_log.h"

#include <gtest/gtest.h>

#include <atomic>

namespace lmcache::events {
namespace {

KvEvent Record(const std::string& model, std::uint8_t tag = 0) {
  KvEvent event;
  event.kind = KvEventKind::kStored;
  event.medium = std::string(kMediumCpu);
  event.model_name = model;
  event.block_hashes.push_back(store::ChunkHash{tag});
  return event;
}

void AppendOne(KvEventLog& log, const std::string& model, std::uint8_t tag = 0) {
  std::vector<KvEvent> events;
  events.push_back(Record(model, tag));
  log.Append(std::move(events));
}

TEST(KvEventLog, CursorBehindTheLogIsLostAndAheadIsLostWithNothing) {
  KvEventLog log({.max_events = 3, .max_bytes = 1u << 20}, 77);
  for (std::uint8_t i = 1; i <= 4; ++i) AppendOne(log, "m", i);  // seq 1..4, 1 dropped

  KvEventPage from_start = log.ReadAfter("m", 0, 10);
  EXPECT_TRUE(from_start.enabled);
  EXPECT_EQ(from_start.incarnation, 77u);
  EXPECT_TRUE(from_start.lost);  // record 1 is gone
  ASSERT_EQ(from_start.events.size(), 3u);
  EXPECT_EQ(from_start.events.front().seq, 2u);
  EXPECT_EQ(from_start.next_cursor, 4u);

  KvEventPage after_one = log.ReadAfter("m", 1, 10);
  EXPECT_FALSE(after_one.lost);
  EXPECT_EQ(after_one.events.size(), 3u);

  KvEventPage ahead = log.ReadAfter("m", 99, 10);  // a cursor of an earlier incarnation
  EXPECT_TRUE(ahead.lost);
  EXPECT_TRUE(ahead.events.empty());
  EXPECT_EQ(ahead.next_cursor, 4u);

  KvEventPage caught_up = log.ReadAfter("m", 4, 10);
  EXPECT_FALSE(caught_up.lost);
  EXPECT_TRUE(caught_up.events.empty());
  EXPECT_EQ(caught_up.next_cursor, 4u);
}

TEST(KvEventLog, PagesOneModelAndOtherModelsAdvanceTheCursor) {
  KvEventLog log({}, 1);
  AppendOne(log, "model");
  AppendOne(log, "other");
  AppendOne(log, "model");
  KvEventPage first = log.ReadAfter("model", 0, 1);
  ASSERT_EQ(first.events.size(), 1u);
  EXPECT_EQ(first.events[0].seq, 1u);
  EXPECT_EQ(first.next_cursor, 1u);
  KvEventPage second = log.ReadAfter("model", first.next_cursor, 1);
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_EQ(second.events[0].seq, 3u);
  EXPECT_EQ(second.next_cursor, 3u);
  EXPECT_EQ(log.ReadAfter(std::nullopt, 0, 10).events.size(), 3u);  // every model
}

TEST(KvEventLog, AClearReachesEveryModelsReader) {
  KvEventLog log({}, 1);
  KvEvent cleared;
  cleared.kind = KvEventKind::kCleared;
  std::vector<KvEvent> events;
  events.push_back(cleared);
  log.Append(std::move(events));
  KvEventPage page = log.ReadAfter("any-model", 0, 10);
  ASSERT_EQ(page.events.size(), 1u);
  EXPECT_EQ(page.events[0].kind, KvEventKind::kCleared);
}

TEST(KvEventLog, BoundedInBytesKeepingTheNewest) {
  const std::size_t one = Record("m").Bytes();
  KvEventLog log({.max_events = 1000, .max_bytes = 10 * one}, 1);
  for (int i = 0; i < 25; ++i) AppendOne(log, "m");
  const KvEventLogStats stats = log.Stats();
  EXPECT_EQ(stats.depth, 10u);
  EXPECT_LE(stats.bytes, 10 * one);
  EXPECT_EQ(stats.dropped, 15u);
  EXPECT_EQ(stats.next_seq, 26u);
  EXPECT_TRUE(log.ReadAfter("m", 0, 100).lost);
  EXPECT_FALSE(log.ReadAfter("m", 15, 100).lost);
}

TEST(KvEventLog, DisabledRecordsNothingAndSaysSo) {
  KvEventLog log({.max_events = 0}, 5);
  AppendOne(log, "m");
  KvEventPage page = log.ReadAfter("m", 0, 10);
  EXPECT_FALSE(page.enabled);
  EXPECT_EQ(page.incarnation, 5u);
  EXPECT_TRUE(page.events.empty());
  EXPECT_EQ(log.Stats().appended, 0u);
}

TEST(KvEventLog, WatchersAreWokenByAppendsUntilUnwatched) {
  KvEventLog log({}, 1);
  std::atomic<int> woken{0};
  const KvEventLog::WatchId id = log.Watch([&woken] { woken.fetch_add(1); });
  AppendOne(log, "m");
  AppendOne(log, "m");
  EXPECT_EQ(woken.load(), 2);
  EXPECT_EQ(log.Stats().watchers, 1u);
  log.Unwatch(id);
  AppendOne(log, "m");
  EXPECT_EQ(woken.load(), 2);
}

TEST(KvEventLog, IncarnationDefaultsToTheWallClock) {
  KvEventLog a({}), b({});
  EXPECT_GT(a.incarnation(), 1'600'000'000'000'000'000ull);  // ns since the epoch, after 2020
  EXPECT_LE(a.incarnation(), b.incarnation());
}

}  // namespace
}  // namespace lmcache::events
