// L2Index: capacity by reservation, LRU eviction of unlocked objects only,
// tenants held to their quotas by evicting their own objects.
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

// A reservation for the empty salt (no quota): true when it was made.
bool Reserved(L2Index& index, std::uint64_t bytes, const L2Index::EvictFn& evict) {
  return index.Reserve("", bytes, evict) == L2Index::Reservation::kReserved;
}

store::ObjectKey TenantKey(std::uint64_t n, const std::string& salt) {
  store::ObjectKey key = KeyN(n);
  key.cache_salt = salt;
  return key;
}

TEST(L2IndexTest, ReservationsCountAgainstCapacityUntilCommittedOrGivenBack) {
  L2Index index(100);
  Evicted evicted;
  ASSERT_TRUE(Reserved(index, 60, evicted.Fn()));
  EXPECT_FALSE(Reserved(index, 50, evicted.Fn()));  // 110 > 100 and nothing to evict
  index.Unreserve("", 60);
  ASSERT_TRUE(Reserved(index, 50, evicted.Fn()));
  EXPECT_TRUE(index.Commit(KeyN(1), 50));
  EXPECT_EQ(index.usage_bytes(), 50u);
  EXPECT_TRUE(evicted.keys.empty());
  EXPECT_FALSE(Reserved(index, 101, evicted.Fn()));  // larger than the whole capacity
}

TEST(L2IndexTest, EvictsLeastRecentlyUsedUnlockedObjects) {
  L2Index index(100);
  Evicted evicted;
  for (int i = 1; i <= 4; ++i) {
    ASSERT_TRUE(Reserved(index, 25, evicted.Fn()));
    ASSERT_TRUE(index.Commit(KeyN(static_cast<std::uint64_t>(i)), 25));
  }
  const std::vector<store::ObjectKey> one = {KeyN(1)};
  EXPECT_EQ(index.LookupAndLock(one), std::vector<bool>{true});  // 1 is now recent and locked
  ASSERT_TRUE(Reserved(index, 40, evicted.Fn()));
  EXPECT_EQ(evicted.keys, (std::vector<store::ObjectKey>{KeyN(2), KeyN(3)}));
  EXPECT_TRUE(index.Contains(KeyN(1)));
  EXPECT_TRUE(index.Contains(KeyN(4)));
}

TEST(L2IndexTest, PinnedObjectsAreNeverEvictedAndAFailedReserveEvictsNothing) {
  L2Index index(50);
  Evicted evicted;
  ASSERT_TRUE(Reserved(index, 50, evicted.Fn()));
  ASSERT_TRUE(index.Commit(KeyN(1), 50));
  const std::vector<store::ObjectKey> keys = {KeyN(1), KeyN(9)};
  EXPECT_EQ(index.LookupAndLock(keys), (std::vector<bool>{true, false}));
  EXPECT_FALSE(Reserved(index, 10, evicted.Fn()));
  EXPECT_TRUE(evicted.keys.empty());
  index.Unlock(keys);
  EXPECT_TRUE(Reserved(index, 10, evicted.Fn()));
  EXPECT_EQ(evicted.keys.size(), 1u);
}

TEST(L2IndexTest, ExistingObjectsAreTrimmedOldestFirstAndCommitIsIdempotent) {
  L2Index index(60);
  Evicted evicted;
  for (int i = 1; i <= 3; ++i) index.AddExisting(KeyN(static_cast<std::uint64_t>(i)), 30);
  index.TrimToCapacity(evicted.Fn());
  EXPECT_EQ(evicted.keys, std::vector<store::ObjectKey>{KeyN(1)});
  EXPECT_EQ(index.usage_bytes(), 60u);
  ASSERT_TRUE(Reserved(index, 0, evicted.Fn()));
  EXPECT_FALSE(index.Commit(KeyN(2), 0));  // already held
  EXPECT_EQ(index.Erase(KeyN(2)), std::optional<std::uint64_t>(30));
  EXPECT_EQ(index.Erase(KeyN(2)), std::nullopt);
  EXPECT_EQ(index.objects(), 1u);
}

TEST(L2IndexTest, ZeroCapacityIsUnbounded) {
  L2Index index(0);
  Evicted evicted;
  ASSERT_TRUE(Reserved(index, 1ull << 50, evicted.Fn()));
  EXPECT_TRUE(evicted.keys.empty());
}

// A tenant at its quota makes room from its own oldest objects, never from
// another's; the tier's capacity still evicts anyone's.
TEST(L2IndexTest, ATenantAtItsQuotaEvictsOnlyItsOwnObjects) {
  L2Index index(1000);
  index.SetLimits([](std::string_view salt) -> std::optional<std::uint64_t> {
    if (salt == "a") return 50;
    return std::nullopt;
  });
  Evicted evicted;
  ASSERT_EQ(index.Reserve("b", 25, evicted.Fn()), L2Index::Reservation::kReserved);
  ASSERT_TRUE(index.Commit(TenantKey(100, "b"), 25));  // the oldest object of all
  for (std::uint64_t n = 1; n <= 4; ++n) {
    ASSERT_EQ(index.Reserve("a", 25, evicted.Fn()), L2Index::Reservation::kReserved) << n;
    ASSERT_TRUE(index.Commit(TenantKey(n, "a"), 25));
    EXPECT_LE(index.tenant_usage_bytes("a"), 50u);
  }
  EXPECT_EQ(evicted.keys, (std::vector<store::ObjectKey>{TenantKey(1, "a"), TenantKey(2, "a")}));
  EXPECT_TRUE(index.Contains(TenantKey(100, "b")));
  EXPECT_EQ(index.tenant_usage_bytes("b"), 25u);
  // Its own objects locked: refused, nothing evicted, however much room the tier has.
  const std::vector<store::ObjectKey> held = {TenantKey(3, "a"), TenantKey(4, "a")};
  ASSERT_EQ(index.LookupAndLock(held), (std::vector<bool>{true, true}));
  evicted.keys.clear();
  EXPECT_EQ(index.Reserve("a", 25, evicted.Fn()), L2Index::Reservation::kOverQuota);
  EXPECT_EQ(index.Reserve("a", 51, evicted.Fn()), L2Index::Reservation::kOverQuota);
  EXPECT_TRUE(evicted.keys.empty());
  // A reservation counts against the quota until it is committed or given back.
  index.Unlock(held);
  ASSERT_EQ(index.Reserve("a", 25, evicted.Fn()), L2Index::Reservation::kReserved);
  EXPECT_EQ(index.tenant_usage_bytes("a"), 50u);
  index.Unreserve("a", 25);
  EXPECT_EQ(index.tenant_usage_bytes("a"), 25u);
  // Every object of a tenant gone: the tenant is forgotten, and comes back.
  index.Erase(TenantKey(4, "a"));
  EXPECT_EQ(index.tenant_usage_bytes("a"), 0u);
  ASSERT_EQ(index.Reserve("a", 50, evicted.Fn()), L2Index::Reservation::kReserved);
  ASSERT_TRUE(index.Commit(TenantKey(9, "a"), 50));
  EXPECT_EQ(index.tenant_usage_bytes("a"), 50u);
  EXPECT_EQ(index.usage_bytes(), 75u);
}

TEST(L2IndexTest, TenantUsageFollowsEveryWayAnObjectComesAndGoes) {
  L2Index index(100);
  index.SetLimits([](std::string_view) { return std::optional<std::uint64_t>(60); });
  Evicted evicted;
  for (int i = 0; i < 200; ++i) {
    const std::string salt = i % 3 == 0 ? "x" : (i % 3 == 1 ? "y" : "");
    const auto key = TenantKey(static_cast<std::uint64_t>(i % 17), salt);
    if (index.Reserve(salt, 10 + static_cast<std::uint64_t>(i % 4) * 10, evicted.Fn()) ==
        L2Index::Reservation::kReserved) {
      if (i % 5 == 0) {
        index.Unreserve(salt, 10 + static_cast<std::uint64_t>(i % 4) * 10);
      } else {
        index.Commit(key, 10 + static_cast<std::uint64_t>(i % 4) * 10);
      }
    }
    if (i % 7 == 0) index.Erase(TenantKey(static_cast<std::uint64_t>(i % 11), salt));
    const std::uint64_t sum = index.tenant_usage_bytes("x") + index.tenant_usage_bytes("y") +
                              index.tenant_usage_bytes("");
    ASSERT_EQ(sum, index.usage_bytes()) << i;
    for (const char* t : {"x", "y", ""}) ASSERT_LE(index.tenant_usage_bytes(t), 60u) << i;
    ASSERT_LE(index.usage_bytes(), 100u) << i;
  }
}

TEST(L2IndexTest, ListsInPagesAndRemovesWhatNoLoadHoldsUnlessForced) {
  L2Index index(0);
  Evicted evicted;
  for (std::uint64_t n = 0; n < 10; ++n) {
    ASSERT_TRUE(Reserved(index, 10 + n, evicted.Fn()));
    ASSERT_TRUE(index.Commit(TenantKey(n, n % 2 ? "odd" : "even"), 10 + n));
  }
  std::vector<store::ObjectKey> listed;
  const store::ObjectKey* after = nullptr;
  std::vector<std::pair<store::ObjectKey, std::uint64_t>> page;
  while (!(page = index.List(after, 4, nullptr)).empty()) {
    for (std::size_t i = 1; i < page.size(); ++i) {
      EXPECT_TRUE(store::ListingLess(page[i - 1].first, page[i].first));
    }
    for (const auto& [key, bytes] : page) listed.push_back(key);
    after = &page.back().first;
  }
  EXPECT_EQ(listed.size(), 10u);
  const auto odd = index.List(nullptr, 100, [](const store::ObjectKey& k) {
    return k.cache_salt == "odd";
  });
  EXPECT_EQ(odd.size(), 5u);

  const std::vector<store::ObjectKey> held = {TenantKey(3, "odd")};
  ASSERT_EQ(index.LookupAndLock(held), std::vector<bool>{true});
  std::vector<store::ObjectKey> removed;
  auto remove = [&removed](const store::ObjectKey& k, std::uint64_t) { removed.push_back(k); };
  EXPECT_EQ(index.Remove(TenantKey(3, "odd"), false, remove), L2Index::Removal::kLocked);
  EXPECT_EQ(index.Remove(TenantKey(3, "odd"), true, remove), L2Index::Removal::kRemoved);
  EXPECT_EQ(index.Remove(TenantKey(3, "odd"), true, remove), L2Index::Removal::kAbsent);
  EXPECT_EQ(index.Remove(TenantKey(4, "even"), false, remove), L2Index::Removal::kRemoved);
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_EQ(index.objects(), 8u);
  EXPECT_EQ(index.tenant_usage_bytes("odd"), 11u + 15 + 17 + 19);
}

// A store the tier's capacity cannot take evicts nothing, not even the
// tenant's own objects its quota would have let go.
TEST(L2IndexTest, AReservationThatCannotFitEvictsNothingForTheQuotaEither) {
  L2Index index(100);
  index.SetLimits([](std::string_view salt) -> std::optional<std::uint64_t> {
    if (salt == "a") return 50;
    return std::nullopt;
  });
  Evicted evicted;
  ASSERT_EQ(index.Reserve("a", 20, evicted.Fn()), L2Index::Reservation::kReserved);
  ASSERT_TRUE(index.Commit(TenantKey(1, "a"), 20));
  ASSERT_EQ(index.Reserve("b", 70, evicted.Fn()), L2Index::Reservation::kReserved);
  ASSERT_TRUE(index.Commit(TenantKey(2, "b"), 70));
  const std::vector<store::ObjectKey> held = {TenantKey(2, "b")};
  ASSERT_EQ(index.LookupAndLock(held), std::vector<bool>{true});
  // 35 more for a: its quota alone would let its 20 go, but with b's 70
  // locked the tier cannot hold 35 more even then: nothing goes.
  EXPECT_EQ(index.Reserve("a", 35, evicted.Fn()), L2Index::Reservation::kNoRoom);
  EXPECT_TRUE(evicted.keys.empty());
  EXPECT_TRUE(index.Contains(TenantKey(1, "a")));
  // 30 fits the tier once a's own 20 goes, which its quota asks for too.
  EXPECT_EQ(index.Reserve("a", 30, evicted.Fn()), L2Index::Reservation::kReserved);
  EXPECT_EQ(evicted.keys, std::vector<store::ObjectKey>{TenantKey(1, "a")});
}

}  // namespace
}  // namespace lmcache::tier
