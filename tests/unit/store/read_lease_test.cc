#include "store/read_lease.h"

#include <gtest/gtest.h>

namespace lmcache::store {
namespace {

constexpr TimeMs kTtl = 300'000;

TEST(ReadLease, CountsAndExpires) {
  ReadLease lease;
  EXPECT_FALSE(lease.IsLocked(0));
  lease.Lock(1, 2, 1000, kTtl);
  EXPECT_TRUE(lease.IsLocked(1000));
  EXPECT_EQ(lease.count(1000), 2u);
  EXPECT_TRUE(lease.IsLocked(1000 + kTtl - 1));
  EXPECT_FALSE(lease.IsLocked(1000 + kTtl));  // expiry makes it evictable
  EXPECT_EQ(lease.count(1000 + kTtl), 0u);
}

TEST(ReadLease, EveryLockRefreshesTheExpiry) {
  ReadLease lease;
  lease.Lock(1, 1, 0, kTtl);
  lease.Lock(2, 1, kTtl - 10, kTtl);
  EXPECT_TRUE(lease.IsLocked(kTtl + 100));
  EXPECT_EQ(lease.count(kTtl + 100), 2u);
}

TEST(ReadLease, LockAfterExpiryForgetsStaleHolders) {
  ReadLease lease;
  lease.Lock(1, 5, 0, kTtl);
  lease.Lock(2, 1, kTtl + 1, kTtl);
  EXPECT_EQ(lease.count(kTtl + 1), 1u);
  EXPECT_EQ(lease.OwnerCount(1, kTtl + 1), 0u);
  EXPECT_EQ(lease.OwnerCount(2, kTtl + 1), 1u);
}

TEST(ReadLease, UnlockPrefersOwnerThenHandsOver) {
  ReadLease lease;
  lease.Lock(/*owner=*/10, 2, 0, kTtl);  // e.g. a lookup by the scheduler
  lease.Lock(/*owner=*/20, 1, 0, kTtl);
  EXPECT_EQ(lease.Unlock(20, 1, 1), 1u);  // its own
  EXPECT_EQ(lease.OwnerCount(10, 1), 2u);
  EXPECT_EQ(lease.Unlock(30, 1, 1), 1u);  // a worker releasing the scheduler's lock
  EXPECT_EQ(lease.OwnerCount(10, 1), 1u);
  EXPECT_EQ(lease.Unlock(30, 5, 1), 1u);  // never below zero
  EXPECT_FALSE(lease.IsLocked(1));
  EXPECT_EQ(lease.Unlock(30, 1, 1), 0u);
}

TEST(ReadLease, ReleaseOwnerDropsOnlyThatOwner) {
  ReadLease lease;
  lease.Lock(1, 3, 0, kTtl);
  lease.Lock(2, 4, 0, kTtl);
  EXPECT_EQ(lease.ReleaseOwner(1, 5), 3u);
  EXPECT_EQ(lease.count(5), 4u);
  EXPECT_EQ(lease.Owners(5), std::vector<OwnerId>{2});
  EXPECT_EQ(lease.ReleaseOwner(1, 5), 0u);
}

}  // namespace
}  // namespace lmcache::store
