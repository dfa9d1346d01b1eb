#include "tier/resp/resp_cluster.h"

#include <gtest/gtest.h>

namespace lmcache::tier {
namespace {

TEST(RespClusterTest, Crc16IsXmodem) {
  // The check value of CRC-16/XMODEM, the one the Redis Cluster spec names.
  EXPECT_EQ(Crc16Xmodem("123456789"), 0x31C3);
  EXPECT_EQ(Crc16Xmodem(""), 0);
}

TEST(RespClusterTest, KeySlotsMatchRedis) {
  // Values from `redis-cli cluster keyslot`.
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("123456789"), 12739);
}

TEST(RespClusterTest, HashTagsPickTheSlot) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("prefix:{abc}@model@0x01"), KeySlot("abc"));
  // An empty tag or an unterminated one hashes the whole key.
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16Xmodem("foo{}{bar}") % kClusterSlots);
  EXPECT_EQ(KeySlot("foo{bar"), Crc16Xmodem("foo{bar") % kClusterSlots);
  // Only the first tag counts.
  EXPECT_EQ(KeySlot("{a}{b}"), KeySlot("a"));
}

TEST(RespClusterTest, RedirectionsAreParsed) {
  auto moved = ParseRedirection("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(moved.has_value());
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->endpoint, "127.0.0.1:6381");
  auto ask = ParseRedirection("ASK 12 10.0.0.2:7000");
  ASSERT_TRUE(ask.has_value());
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->slot, 12);
}

TEST(RespClusterTest, OtherErrorsAreNotRedirections) {
  EXPECT_FALSE(ParseRedirection("CLUSTERDOWN The cluster is down"));
  EXPECT_FALSE(ParseRedirection("MOVED 16384 127.0.0.1:6381"));  // slot out of range
  EXPECT_FALSE(ParseRedirection("MOVED x 127.0.0.1:6381"));
  EXPECT_FALSE(ParseRedirection("MOVED 12 :6381"));  // "the host you used": unroutable
  EXPECT_FALSE(ParseRedirection("MOVED 12"));
  EXPECT_FALSE(ParseRedirection("ERR wrong"));
}

TEST(RespClusterTest, SlotMapRoutesAndMoves) {
  auto map = SlotMap::FromRanges({{0, 5460, "a:1"}, {5461, 10922, "b:2"}, {10923, 16383, "c:3"}});
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->served_slots(), kClusterSlots);
  EXPECT_EQ(map->endpoints()[*map->NodeOf(0)], "a:1");
  EXPECT_EQ(map->endpoints()[*map->NodeOf(5461)], "b:2");
  EXPECT_EQ(map->endpoints()[*map->NodeOf(16383)], "c:3");
  map->Move(0, "d:4");
  EXPECT_EQ(map->endpoints()[*map->NodeOf(0)], "d:4");
  EXPECT_EQ(map->endpoints()[*map->NodeOf(1)], "a:1");
  EXPECT_EQ(map->endpoints().size(), 4u);
}

TEST(RespClusterTest, UnservedSlotsAndBadRangesAreReported) {
  auto partial = SlotMap::FromRanges({{0, 99, "a:1"}});
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->served_slots(), 100u);
  EXPECT_FALSE(partial->NodeOf(100).has_value());
  EXPECT_FALSE(SlotMap::FromRanges({{10, 5, "a:1"}}).ok());
  EXPECT_FALSE(SlotMap::FromRanges({{0, 16384, "a:1"}}).ok());
  EXPECT_FALSE(SlotMap::FromRanges({{0, 1, ""}}).ok());
}

}  // namespace
}  // namespace lmcache::tier
