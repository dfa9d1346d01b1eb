// L2Index: capacity by reservation, LRU eviction of unlocked objects only.
#include "tier/l2_index.h"

#include <gtest/gtest.h>

#include "fakes/keys.h"

namespace lmcache::tier {
namespace {

using testing::KeyN;

struct Evicted {
  std::vector<store::ObjectKey> keys;
  L2Index::EvictFn Fn() {
    return [this](const store::ObjectKey& key, std::uint64_t) { keys.push_back(key); };
  }
};

TEST(L2IndexTest, ReservationsCountAgainstCapacityUntilCommittedOrGivenBack) {
  L2Index index(100);
  Evicted evicted;
  ASSERT_TRUE(index.Reserve(60, evicted.Fn()));
  EXPECT_FALSE(index.Reserve(50, evicted.Fn()));  // 110 > 100 and nothing to evict
  index.Unreserve(60);
  ASSERT_TRUE(index.Reserve(50, evicted.Fn()));
  EXPECT_TRUE(index.Commit(KeyN(1), 50));
  EXPECT_EQ(index.usage_bytes(), 50u);
  EXPECT_TRUE(evicted.keys.empty());
  EXPECT_FALSE(index.Reserve(101, evicted.Fn()));  // larger than the whole capacity
}

TEST(L2IndexTest, EvictsLeastRecentlyUsedUnlockedObjects) {
  L2Index index(100);
  Evicted evicted;
  for (int i = 1; i <= 4; ++i) {
    ASSERT_TRUE(index.Reserve(25, evicted.Fn()));
    ASSERT_TRUE(index.Commit(KeyN(static_cast<std::uint64_t>(i)), 25));
  }
  const std::vector<store::ObjectKey> one = {KeyN(1)};
  EXPECT_EQ(index.LookupAndLock(one), std::vector<bool>{true});  // 1 is now recent and locked
  ASSERT_TRUE(index.Reserve(40, evicted.Fn()));
  EXPECT_EQ(evicted.keys, (std::vector<store::ObjectKey>{KeyN(2), KeyN(3)}));
  EXPECT_TRUE(index.Contains(KeyN(1)));
  EXPECT_TRUE(index.Contains(KeyN(4)));
}

TEST(L2IndexTest, PinnedObjectsAreNeverEvictedAndAFailedReserveEvictsNothing) {
  L2Index index(50);
  Evicted evicted;
  ASSERT_TRUE(index.Reserve(50, evicted.Fn()));
  ASSERT_TRUE(index.Commit(KeyN(1), 50));
  const std::vector<store::ObjectKey> keys = {KeyN(1), KeyN(9)};
  EXPECT_EQ(index.LookupAndLock(keys), (std::vector<bool>{true, false}));
  EXPECT_FALSE(index.Reserve(10, evicted.Fn()));
  EXPECT_TRUE(evicted.keys.empty());
  index.Unlock(keys);
  EXPECT_TRUE(index.Reserve(10, evicted.Fn()));
  EXPECT_EQ(evicted.keys.size(), 1u);
}

TEST(L2IndexTest, ExistingObjectsAreTrimmedOldestFirstAndCommitIsIdempotent) {
  L2Index index(60);
  Evicted evicted;
  for (int i = 1; i <= 3; ++i) index.AddExisting(KeyN(static_cast<std::uint64_t>(i)), 30);
  index.TrimToCapacity(evicted.Fn());
  EXPECT_EQ(evicted.keys, std::vector<store::ObjectKey>{KeyN(1)});
  EXPECT_EQ(index.usage_bytes(), 60u);
  ASSERT_TRUE(index.Reserve(0, evicted.Fn()));
  EXPECT_FALSE(index.Commit(KeyN(2), 0));  // already held
  EXPECT_EQ(index.Erase(KeyN(2)), std::optional<std::uint64_t>(30));
  EXPECT_EQ(index.Erase(KeyN(2)), std::nullopt);
  EXPECT_EQ(index.objects(), 1u);
}

TEST(L2IndexTest, ZeroCapacityIsUnbounded) {
  L2Index index(0);
  Evicted evicted;
  ASSERT_TRUE(index.Reserve(1ull << 50, evicted.Fn()));
  EXPECT_TRUE(evicted.keys.empty());
}

}  // namespace
}  // namespace lmcache::tier
