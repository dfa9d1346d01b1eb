// LeaseRegistry: records by id and by owner, expiry, kinds.
#include "store/lease_registry.h"

#include <gtest/gtest.h>

#include "fakes/keys.h"

namespace lmcache::store {
namespace {

using testing::KeyN;

TEST(LeaseRegistry, IdsAreFreshAndNeverNoLease) {
  LeaseRegistry registry;
  const LeaseId a = registry.NewId();
  const LeaseId b = registry.NewId();
  EXPECT_NE(a, kNoLease);
  EXPECT_NE(a, b);
}

TEST(LeaseRegistry, TakeReturnsTheRecordOnceAndOnlyForItsKind) {
  LeaseRegistry registry;
  const LeaseId id = registry.NewId();
  registry.Add(id, {Owner::Instance(1), LeaseKind::kRead, {KeyN(1), KeyN(2)}, 100});
  EXPECT_FALSE(registry.Take(id, LeaseKind::kWrite).has_value());
  auto record = registry.Take(id, LeaseKind::kRead);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->keys.size(), 2u);
  EXPECT_FALSE(registry.Take(id, LeaseKind::kRead).has_value());
}

TEST(LeaseRegistry, TakeOwnerReturnsEveryLeaseOfThatOwnerOnly) {
  LeaseRegistry registry;
  const Owner a = Owner::Instance(1);
  registry.Add(registry.NewId(), {a, LeaseKind::kRead, {KeyN(1)}, 100});
  registry.Add(registry.NewId(), {a, LeaseKind::kWrite, {KeyN(2)}, 100});
  registry.Add(registry.NewId(), {Owner::Session(1), LeaseKind::kRead, {KeyN(3)}, 100});
  EXPECT_EQ(registry.TakeOwner(a).size(), 2u);
  EXPECT_EQ(registry.TakeOwner(a).size(), 0u);
  EXPECT_EQ(registry.Counts().read, 1u);
}

TEST(LeaseRegistry, AppendExtendsALeaseAndTakeExpiredDropsOldRecords) {
  LeaseRegistry registry;
  const LeaseId id = registry.NewId();
  registry.Append(id, {Owner::Session(2), LeaseKind::kRead, {KeyN(1)}, 100});
  registry.Append(id, {Owner::Session(2), LeaseKind::kRead, {KeyN(2)}, 200});
  EXPECT_EQ(registry.Get(id)->keys.size(), 2u);
  EXPECT_TRUE(registry.TakeExpired(199).empty());
  EXPECT_EQ(registry.TakeExpired(200).size(), 1u);
  EXPECT_EQ(registry.Counts().read, 0u);
}

}  // namespace
}  // namespace lmcache::store
