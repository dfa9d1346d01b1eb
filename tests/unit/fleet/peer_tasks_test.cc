// PeerTasks, the owner side of the peers' lookups (p2p-spec.md 5.1-5.4):
// addresses once and in request order, locks owned by (peer, task) so no
// other peer and no duplicate unlock can release them, a size other than the
// layout's is a miss, unqueried tasks are reaped with their locks, and each
// peer is bounded. A real ObjectTable over heap memory.
#include "fleet/peer_tasks.h"

#include <gtest/gtest.h>

#include "fakes/fake_clock.h"
#include "fakes/keys.h"
#include "fakes/l1_table.h"

namespace lmcache::fleet {
namespace {

using testing::KeyN;

constexpr std::size_t kObject = 4096;

class PeerTasksTest : public ::testing::Test {
 protected:
  PeerTasksTest() : l1_(64 << 20) {}

  std::unique_ptr<PeerTasks> Make(PeerTaskConfig config = {}) {
    return std::make_unique<PeerTasks>(&l1_.table(), &clock_, config);
  }
  static std::vector<RequestedObject> Ask(std::initializer_list<store::ObjectKey> keys,
                                          std::uint64_t expected = kObject) {
    std::vector<RequestedObject> asked;
    for (const auto& key : keys) asked.push_back({key, expected});
    return asked;
  }
  protocol::P2pAddress AddressOf(const store::ObjectKey& key) {
    const auto info = l1_.table().Find(key);
    return {static_cast<std::int64_t>(info->offset), static_cast<std::int64_t>(info->size)};
  }

  testing::L1Table l1_;
  testing::FakeClock clock_;
};

TEST_F(PeerTasksTest, AnswersEachKeysAddressOnceInRequestOrderAndLocksEachKeyOnce) {
  l1_.Store(KeyN(1), kObject, 1);
  l1_.Store(KeyN(3), kObject, 3);
  auto tasks = Make();
  const std::int64_t task = tasks->Lookup("a", Ask({KeyN(1), KeyN(2), KeyN(3), KeyN(1)}));
  EXPECT_EQ(l1_.Locks(KeyN(1)), 1u);  // a duplicate is one lock, one address
  EXPECT_EQ(l1_.Locks(KeyN(3)), 1u);
  auto addresses = tasks->Results("a", task);
  ASSERT_TRUE(addresses.has_value());
  ASSERT_EQ(addresses->size(), 4u);
  EXPECT_EQ((*addresses)[0], AddressOf(KeyN(1)));
  EXPECT_EQ((*addresses)[1], (protocol::P2pAddress{-1, 0}));
  EXPECT_EQ((*addresses)[2], AddressOf(KeyN(3)));
  EXPECT_EQ((*addresses)[3], AddressOf(KeyN(1)));
  EXPECT_FALSE(tasks->Results("a", task).has_value());  // exactly once
  EXPECT_EQ(tasks->Unlock("a", std::vector{KeyN(1), KeyN(3)}), 2u);
  l1_.ExpectBalanced();
  const PeerTaskStats stats = tasks->Stats();
  EXPECT_EQ(stats.lookups, 1u);
  EXPECT_EQ(stats.requested_keys, 4u);
  EXPECT_EQ(stats.hit_keys, 2u);
  EXPECT_EQ(stats.unknown_queries, 1u);
  EXPECT_EQ(stats.tasks, 0u);
}

TEST_F(PeerTasksTest, AnotherPeerCanNeitherQueryNorUnlockATask) {
  l1_.Store(KeyN(1), kObject, 1);
  auto tasks = Make();
  const std::int64_t task = tasks->Lookup("a", Ask({KeyN(1)}));
  EXPECT_FALSE(tasks->Results("b", task).has_value());
  EXPECT_EQ(tasks->Unlock("b", std::vector{KeyN(1)}), 0u);
  EXPECT_EQ(l1_.Locks(KeyN(1)), 1u);
  EXPECT_TRUE(tasks->Results("a", task).has_value());
  EXPECT_EQ(tasks->Stats().stale_unlocks, 1u);
}

TEST_F(PeerTasksTest, AnUnlockReleasesOnlyThePeersOwnLockAndADuplicateReleasesNothing) {
  l1_.Store(KeyN(1), kObject, 1);
  const store::ObjectKey key = KeyN(1);
  store::ReadRequest local;
  local.keys = std::span(&key, 1);
  local.owner = store::Owner::Session(9);
  auto reader = l1_.table().AcquireRead(local);  // a local retrieve holds it too
  ASSERT_TRUE(reader.ok() && reader->granted == 1);
  auto tasks = Make();
  const std::int64_t task = tasks->Lookup("a", Ask({key}));
  ASSERT_TRUE(tasks->Results("a", task).has_value());
  EXPECT_EQ(l1_.Locks(key), 2u);
  EXPECT_EQ(tasks->Unlock("a", std::vector{key, key}), 1u);
  EXPECT_EQ(tasks->Unlock("a", std::vector{key}), 0u);  // late
  EXPECT_EQ(l1_.Locks(key), 1u);  // the local reader's
  EXPECT_EQ(tasks->Stats().stale_unlocks, 2u);
  l1_.table().ReleaseRead(reader->lease);
  l1_.ExpectBalanced();
}

// Our requesters unlock by task (p2p_unlock_task): an owner that restarted
// between a requester's lookup and its unlock gets an unlock naming a task
// of its previous life, which names no task here and releases nothing,
// though the same requester holds a lock on the same key from a later
// lookup (a by-key unlock, op 31, releases that one).
TEST_F(PeerTasksTest, AnUnlockByTaskReleasesOnlyThatTasksLockAndNothingForAnUnknownTask) {
  l1_.Store(KeyN(1), kObject, 1);
  auto tasks = Make();
  const std::int64_t first = tasks->Lookup("a", Ask({KeyN(1)}));
  const std::int64_t second = tasks->Lookup("a", Ask({KeyN(1)}));
  ASSERT_TRUE(tasks->Results("a", first).has_value());
  ASSERT_TRUE(tasks->Results("a", second).has_value());
  EXPECT_EQ(l1_.Locks(KeyN(1)), 2u);
  const std::vector<store::ObjectKey> key{KeyN(1)};
  EXPECT_EQ(tasks->UnlockTask("a", second, key), 1u);
  EXPECT_EQ(tasks->UnlockTask("a", second, key), 0u);          // a duplicate
  EXPECT_EQ(tasks->UnlockTask("a", first + 1000, key), 0u);    // a previous life's task
  EXPECT_EQ(tasks->UnlockTask("b", first, key), 0u);           // another peer's
  EXPECT_EQ(l1_.Locks(KeyN(1)), 1u);                           // the first task's stands
  EXPECT_EQ(tasks->Stats().stale_unlocks, 3u);
  EXPECT_EQ(tasks->UnlockTask("a", first, key), 1u);
  EXPECT_EQ(tasks->Stats().tasks, 0u);  // a queried task with nothing locked is done
  l1_.ExpectBalanced();
}

// The data channel asks, for each read, whether its task holds that exact
// range locked now: an owner serves nothing else (a range of another
// object, one its task never locked or has unlocked, a task reaped or of a
// previous life).
TEST_F(PeerTasksTest, AReadIsServedOnlyForAnObjectItsTaskHoldsLockedNow) {
  l1_.Store(KeyN(1), kObject, 1);
  l1_.Store(KeyN(2), kObject, 2);
  auto tasks = Make();
  const std::int64_t task = tasks->Lookup("a", Ask({KeyN(1)}));
  const protocol::P2pAddress one = AddressOf(KeyN(1));
  const protocol::P2pAddress two = AddressOf(KeyN(2));
  auto offset = [](const protocol::P2pAddress& a) { return static_cast<std::uint64_t>(a.offset); };
  EXPECT_TRUE(tasks->Holds(task, offset(one), kObject));  // before its query, too
  ASSERT_TRUE(tasks->Results("a", task).has_value());
  EXPECT_TRUE(tasks->Holds(task, offset(one), kObject));
  EXPECT_FALSE(tasks->Holds(task, offset(two), kObject));     // not this task's
  EXPECT_FALSE(tasks->Holds(task, offset(one), kObject - 1));  // not the whole object
  EXPECT_FALSE(tasks->Holds(task, offset(one) + 1, kObject));
  EXPECT_FALSE(tasks->Holds(task + 1, offset(one), kObject));  // no such task
  EXPECT_EQ(tasks->Unlock("a", std::vector{KeyN(1)}), 1u);
  EXPECT_FALSE(tasks->Holds(task, offset(one), kObject));     // unlocked
  const std::int64_t reaped = tasks->Lookup("a", Ask({KeyN(2)}));
  EXPECT_TRUE(tasks->Holds(reaped, offset(two), kObject));
  clock_.Advance(PeerTaskConfig{}.query_timeout_ms);
  EXPECT_EQ(tasks->Reap(), 1u);
  EXPECT_FALSE(tasks->Holds(reaped, offset(two), kObject));
  // Past the read TTL the store ended the lease: no longer held, though the
  // reaper has not run yet.
  const std::int64_t expiring = tasks->Lookup("a", Ask({KeyN(2)}));
  ASSERT_TRUE(tasks->Results("a", expiring).has_value());
  EXPECT_TRUE(tasks->Holds(expiring, offset(two), kObject));
  clock_.Advance(PeerTaskConfig{}.read_ttl_ms);
  EXPECT_FALSE(tasks->Holds(expiring, offset(two), kObject));
  tasks->Reap();
  l1_.ExpectBalanced();
}

TEST_F(PeerTasksTest, AnObjectOfAnotherSizeThanTheLayoutsIsAMissAndKeepsNoLock) {
  l1_.Store(KeyN(1), kObject, 1);
  auto tasks = Make();
  const std::int64_t task = tasks->Lookup("a", Ask({KeyN(1)}, 2 * kObject));
  auto addresses = tasks->Results("a", task);
  ASSERT_TRUE(addresses.has_value());
  EXPECT_FALSE((*addresses)[0].valid());
  EXPECT_EQ(tasks->Stats().size_mismatches, 1u);
  l1_.ExpectBalanced();
}

TEST_F(PeerTasksTest, ATaskNeverQueriedIsReapedWithItsLocks) {
  l1_.Store(KeyN(1), kObject, 1);
  PeerTaskConfig config;
  config.query_timeout_ms = 1000;
  auto tasks = Make(config);
  const std::int64_t task = tasks->Lookup("a", Ask({KeyN(1)}));
  clock_.Advance(999);
  EXPECT_EQ(tasks->Reap(), 0u);
  EXPECT_EQ(l1_.Locks(KeyN(1)), 1u);
  clock_.Advance(1);
  EXPECT_EQ(tasks->Reap(), 1u);
  l1_.ExpectBalanced();
  EXPECT_FALSE(tasks->Results("a", task).has_value());
  EXPECT_EQ(tasks->Stats().reaped_tasks, 1u);
}

// A requester unlocks only keys it learned from an answered query; a task
// it never queried (its lookup's deadline passed while the request was on
// the way: a partition that queued it) is the reaper's. So an unlock
// releases an answered task's lock first: before, it released the oldest
// task's, the unqueried one's, and the answered task's lock stayed until
// the read TTL (seen in test_p2p_fleet.py's partition).
TEST_F(PeerTasksTest, AnUnlockReleasesAnAnsweredTasksLockBeforeAnUnqueriedOnes) {
  l1_.Store(KeyN(1), kObject, 1);
  PeerTaskConfig config;
  config.query_timeout_ms = 1000;
  auto tasks = Make(config);
  const std::int64_t stale = tasks->Lookup("a", Ask({KeyN(1)}));  // never queried
  const std::int64_t answered = tasks->Lookup("a", Ask({KeyN(1)}));
  ASSERT_TRUE(tasks->Results("a", answered).has_value());
  EXPECT_EQ(l1_.Locks(KeyN(1)), 2u);
  EXPECT_EQ(tasks->Unlock("a", std::vector{KeyN(1)}), 1u);
  EXPECT_EQ(tasks->Stats().tasks, 1u);  // the answered task ended with its last lock
  EXPECT_TRUE(tasks->Results("a", stale).has_value());  // the stale one still holds its lock
  clock_.Advance(1000);
  tasks->Reap();
  EXPECT_EQ(l1_.Locks(KeyN(1)), 1u);  // queried now: it waits for its unlock
  EXPECT_EQ(tasks->Unlock("a", std::vector{KeyN(1)}), 1u);
  l1_.ExpectBalanced();
}

TEST_F(PeerTasksTest, AQueriedTaskIsForgottenAtTheReadTtlAndItsLeaseEnded) {
  l1_.Store(KeyN(1), kObject, 1);
  PeerTaskConfig config;
  config.query_timeout_ms = 1000;
  config.read_ttl_ms = 5000;
  auto tasks = Make(config);
  const std::int64_t task = tasks->Lookup("a", Ask({KeyN(1)}));
  ASSERT_TRUE(tasks->Results("a", task).has_value());
  clock_.Advance(4999);
  EXPECT_EQ(tasks->Reap(), 0u);  // queried: not reaped at the query timeout
  clock_.Advance(1);
  EXPECT_EQ(tasks->Reap(), 1u);
  l1_.ExpectBalanced();
  EXPECT_EQ(tasks->Stats().reaped_tasks, 0u);
}

TEST_F(PeerTasksTest, APeerPastItsBoundsGetsMissesAndOthersAreNotAffected) {
  l1_.Store(KeyN(1), kObject, 1);
  l1_.Store(KeyN(2), kObject, 2);
  PeerTaskConfig config;
  config.max_tasks_per_peer = 1;
  config.max_locked_bytes_per_peer = kObject;
  auto tasks = Make(config);
  const std::int64_t first = tasks->Lookup("a", Ask({KeyN(1), KeyN(2)}));
  const std::int64_t second = tasks->Lookup("a", Ask({KeyN(1)}));
  const std::int64_t other = tasks->Lookup("b", Ask({KeyN(2)}));
  auto a1 = tasks->Results("a", first);
  auto a2 = tasks->Results("a", second);
  auto b = tasks->Results("b", other);
  ASSERT_TRUE(a1 && a2 && b);
  EXPECT_TRUE((*a1)[0].valid());
  EXPECT_FALSE((*a1)[1].valid());  // past a's bytes
  EXPECT_FALSE((*a2)[0].valid());  // past a's tasks
  EXPECT_TRUE((*b)[0].valid());
  EXPECT_EQ(tasks->Stats().refused_keys, 2u);
  EXPECT_EQ(tasks->Stats().locked_bytes, 2 * kObject);
}

TEST_F(PeerTasksTest, APeerThatNeverQueriesCannotGrowTheTableBeyondItsBound) {
  l1_.Store(KeyN(1), kObject, 1);
  PeerTaskConfig config;
  config.max_tasks_per_peer = 4;
  auto tasks = Make(config);
  const std::int64_t locked = tasks->Lookup("a", Ask({KeyN(1)}));
  std::int64_t last = 0;
  for (int i = 0; i < 1000; ++i) last = tasks->Lookup("a", Ask({KeyN(2), KeyN(3)}));
  EXPECT_LE(tasks->Stats().tasks, 5u);
  EXPECT_EQ(tasks->Stats().displaced_tasks, 1000u - 3u);
  // The task holding a lock stays, and so does the newest.
  auto held = tasks->Results("a", locked);
  ASSERT_TRUE(held.has_value());
  EXPECT_TRUE((*held)[0].valid());
  auto newest = tasks->Results("a", last);
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->size(), 2u);
}

TEST_F(PeerTasksTest, AnUntrustedPeerGetsATaskOfMissesAndLocksNothing) {
  l1_.Store(KeyN(1), kObject, 1);
  auto tasks = Make();
  const std::int64_t task = tasks->Lookup("stranger", Ask({KeyN(1), KeyN(1)}), /*trusted=*/false);
  EXPECT_EQ(tasks->Stats().locked_objects, 0u);
  auto results = tasks->Results("stranger", task);
  ASSERT_TRUE(results.has_value());  // its first query ends its lookup
  ASSERT_EQ(results->size(), 2u);
  EXPECT_FALSE((*results)[0].valid());
  EXPECT_FALSE((*results)[1].valid());
  EXPECT_EQ(tasks->Stats().untrusted_keys, 2u);
  EXPECT_EQ(tasks->Stats().hit_keys, 0u);
  EXPECT_EQ(tasks->Stats().tasks, 0u);
}

// Every peer together (issue 62, section 8): one member cannot lock more
// than the pool's fraction, and connections that did not prove the key,
// each a peer of its own, cannot grow the table of tasks past its bound
// (before, 16 lookups of 900k keys held 449 MiB).
TEST_F(PeerTasksTest, EveryPeerTogetherIsBoundedInLockedBytesAndInTasks) {
  for (std::uint64_t i = 1; i <= 3; ++i) l1_.Store(KeyN(i), kObject, static_cast<int>(i));
  PeerTaskConfig config;
  config.max_locked_bytes_total = 2 * kObject;
  config.max_tasks_total = 10;
  auto tasks = Make(config);
  const std::int64_t a = tasks->Lookup("a", Ask({KeyN(1), KeyN(2)}));
  const std::int64_t b = tasks->Lookup("b", Ask({KeyN(3)}));
  auto a_results = tasks->Results("a", a);
  auto b_results = tasks->Results("b", b);
  ASSERT_TRUE(a_results && b_results);
  EXPECT_TRUE((*a_results)[0].valid() && (*a_results)[1].valid());
  EXPECT_FALSE((*b_results)[0].valid());  // past every peer's bytes together
  EXPECT_EQ(tasks->Stats().locked_bytes, 2 * kObject);
  EXPECT_EQ(tasks->Stats().refused_keys, 1u);
  std::vector<RequestedObject> many(10'000, RequestedObject{KeyN(1), kObject});
  for (int i = 0; i < 100; ++i) {
    tasks->Lookup("stranger-" + std::to_string(i), many, /*trusted=*/false);
  }
  EXPECT_LE(tasks->Stats().tasks, 10u);
  EXPECT_EQ(tasks->Unlock("a", std::vector{KeyN(1), KeyN(2)}), 2u);
  EXPECT_EQ(tasks->Stats().locked_bytes, 0u);
}

TEST_F(PeerTasksTest, DroppingAPeerOrDestroyingTheTableOfTasksReleasesEverything) {
  l1_.Store(KeyN(1), kObject, 1);
  l1_.Store(KeyN(2), kObject, 2);
  {
    auto tasks = Make();
    tasks->Lookup("a", Ask({KeyN(1)}));
    const std::int64_t b = tasks->Lookup("b", Ask({KeyN(1), KeyN(2)}));
    ASSERT_TRUE(tasks->Results("b", b).has_value());
    EXPECT_EQ(tasks->DropPeer("a"), 1u);
    EXPECT_EQ(l1_.Locks(KeyN(1)), 1u);  // b's
    EXPECT_EQ(tasks->Stats().locked_objects, 2u);
  }
  l1_.ExpectBalanced();
}

TEST_F(PeerTasksTest, TaskIdsStartAtTheConfiguredBaseAndNeverRepeat) {
  PeerTaskConfig config;
  config.first_task_id = 1'000'000;
  auto tasks = Make(config);
  EXPECT_EQ(tasks->Lookup("a", {}), 1'000'000);
  EXPECT_EQ(tasks->Lookup("b", {}), 1'000'001);
  auto empty = tasks->Results("a", 1'000'000);
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace lmcache::fleet
