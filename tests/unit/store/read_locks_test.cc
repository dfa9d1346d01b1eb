// ReadLocks: exact per-lease holds with their own expiry.
#include "store/read_locks.h"

#include <gtest/gtest.h>

namespace lmcache::store {
namespace {

const Owner kA = Owner::Instance(1);
const Owner kB = Owner::Instance(2);
constexpr TimeMs kTtl = 1000;

TEST(ReadLocks, AReleaseTouchesOnlyItsOwnLease) {
  ReadLocks locks;
  locks.Lock(1, kA, 1, 0, kTtl);
  locks.Lock(2, kB, 1, 0, kTtl);
  EXPECT_EQ(locks.count(0), 2u);
  EXPECT_EQ(locks.Unlock(1, 5, 0), 1u);  // never more than the lease holds
  EXPECT_EQ(locks.Unlock(1, 1, 0), 0u);  // and never another lease's lock
  EXPECT_TRUE(locks.IsLocked(0));
  EXPECT_EQ(locks.LeaseCount(2, 0), 1u);
  EXPECT_EQ(locks.Unlock(2, 1, 0), 1u);
  EXPECT_FALSE(locks.IsLocked(0));
}

TEST(ReadLocks, EachLeaseExpiresOnItsOwnAndIsNeverHandedOn) {
  ReadLocks locks;
  locks.Lock(1, kA, 2, 0, kTtl);
  locks.Lock(2, kB, 1, 900, kTtl);  // a fresh lease does not refresh the older one
  EXPECT_EQ(locks.count(999), 3u);
  EXPECT_EQ(locks.count(1000), 1u);  // lease 1 expired
  EXPECT_EQ(locks.Unlock(1, 2, 1000), 0u);
  EXPECT_EQ(locks.LeaseCount(2, 1000), 1u);
  EXPECT_TRUE(locks.IsLocked(1899));
  EXPECT_FALSE(locks.IsLocked(1900));
}

TEST(ReadLocks, RelockingALeaseAddsAndRefreshesIt) {
  ReadLocks locks;
  locks.Lock(1, kA, 1, 0, kTtl);
  locks.Lock(1, kA, 2, 500, kTtl);
  EXPECT_EQ(locks.LeaseCount(1, 1400), 3u);
  EXPECT_EQ(locks.holds(0), 1u);
  locks.Lock(1, kA, 200, 500, kTtl);
  EXPECT_EQ(locks.LeaseCount(1, 500), kMaxReadLockCount);
}

TEST(ReadLocks, TransferMovesOneLiveLockAndKeepsTheObjectLocked) {
  ReadLocks locks;
  locks.Lock(1, Owner::Session(9), 2, 0, kTtl);  // a lookup for two readers
  EXPECT_TRUE(locks.Transfer(1, 2, kA, 100, kTtl));
  EXPECT_TRUE(locks.Transfer(1, 3, kB, 100, kTtl));
  EXPECT_FALSE(locks.Transfer(1, 4, kB, 100, kTtl));  // the lookup's share is used up
  EXPECT_EQ(locks.LeaseCount(1, 100), 0u);
  EXPECT_EQ(locks.Unlock(2, 1, 200), 1u);
  EXPECT_TRUE(locks.IsLocked(200));  // B still copies
  EXPECT_EQ(locks.Unlock(3, 1, 200), 1u);
  EXPECT_FALSE(locks.IsLocked(200));
}

TEST(ReadLocks, AnExpiredLeaseCannotBeTransferred) {
  ReadLocks locks;
  locks.Lock(1, Owner::Session(9), 1, 0, kTtl);
  EXPECT_FALSE(locks.Transfer(1, 2, kA, kTtl, kTtl));
  EXPECT_FALSE(locks.IsLocked(kTtl));
}

TEST(ReadLocks, ReleaseOwnerDropsEveryLeaseOfThatOwnerOnly) {
  ReadLocks locks;
  locks.Lock(1, kA, 1, 0, kTtl);
  locks.Lock(2, kA, 3, 0, kTtl);
  locks.Lock(3, kB, 1, 0, kTtl);
  EXPECT_EQ(locks.ReleaseOwner(kA, 0), 4u);
  EXPECT_EQ(locks.count(0), 1u);
  EXPECT_EQ(locks.LeaseCount(3, 0), 1u);
}

}  // namespace
}  // namespace lmcache::store
