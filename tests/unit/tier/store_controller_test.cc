// StoreController: new client objects are written behind to every adapter,
// never those that came from L2; a full queue skips instead of blocking;
// failures are counted; every lock is released, also at stop.
#include "tier/store_controller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "fakes/gated_adapter.h"
#include "fakes/keys.h"
#include "fakes/l1_table.h"
#include "fakes/wait_until.h"
#include "tier/fault/fault_adapter.h"
#include "tier/mock/mock_adapter.h"

namespace lmcache::tier {
namespace {

using testing::KeyN;
using testing::KeysN;
using testing::WaitUntil;
constexpr std::size_t kObject = 256 * 1024;
constexpr auto kWait = std::chrono::seconds(30);

class StoreControllerTest : public ::testing::Test {
 protected:
  StoreControllerTest() : l1_(32 << 20) {}
  std::unique_ptr<StoreController> Controller(std::vector<L2Adapter*> adapters,
                                              StoreControllerConfig config = {}) {
    auto controller = std::make_unique<StoreController>(&l1_.table(), adapters, config);
    l1_.table().AddListener(controller.get());
    return controller;
  }
  // The adapter holds `key` with the bytes of `seed`.
  static bool Holds(L2Adapter& adapter, const store::ObjectKey& key, std::uint64_t seed) {
    std::vector<std::byte> out(kObject);
    const std::vector<L2Read> reads = {{&key, out}};
    return adapter.Load(reads)[0] == L2LoadOutcome::kLoaded &&
           out == testing::ObjectBytes(kObject, seed);
  }
  testing::L1Table l1_;
};

TEST_F(StoreControllerTest, NewObjectsAreWrittenToEveryAdapterAndNoLockIsLeft) {
  MockAdapter a({}), b({});
  auto controller = Controller({&a, &b});
  controller->Start();
  const auto keys = KeysN(0, 5);
  for (std::size_t i = 0; i < keys.size(); ++i) l1_.Store(keys[i], kObject, i);
  ASSERT_TRUE(controller->WaitIdle(kWait));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(Holds(a, keys[i], i)) << i;
    EXPECT_TRUE(Holds(b, keys[i], i)) << i;
  }
  EXPECT_EQ(controller->Stats().stored, 5u);
  EXPECT_EQ(l1_.table().Stats().resident_objects, 5u);  // policy default keeps L1
  l1_.ExpectBalanced();
}

TEST_F(StoreControllerTest, ObjectsLoadedFromL2AreNotWrittenBack) {
  MockAdapter a({});
  auto controller = Controller({&a});
  controller->Start();
  const auto key = KeyN(1);
  auto lease = l1_.table().ReserveWrite(std::span(&key, 1), kObject, store::Owner::Internal(2),
                                        store::AllocationMode::kAllOrNothing);
  auto read = l1_.table().FinishWriteAndRead(lease->lease, store::Owner::Session(1), 1);
  ASSERT_EQ(read->granted, 1u);
  ASSERT_TRUE(controller->WaitIdle(kWait));
  EXPECT_EQ(a.Stats().stored_objects, 0u);
  EXPECT_EQ(controller->Stats().stored, 0u);
  l1_.table().ReleaseRead(read->lease);
}

TEST_F(StoreControllerTest, AFullQueueSkipsAndCountsAndTheStorePathNeverWaits) {
  MockAdapter a({});
  StoreControllerConfig config;
  config.max_queue_objects = 2;
  auto controller = Controller({&a}, config);  // not started: nothing drains
  for (std::uint64_t i = 0; i < 5; ++i) l1_.Store(KeyN(i), kObject, i);
  const StoreControllerStats s = controller->Stats();
  EXPECT_EQ(s.queued_objects, 2u);
  EXPECT_EQ(s.skipped_queue_full, 3u);
  controller->Start();
  ASSERT_TRUE(controller->WaitIdle(kWait));
  EXPECT_EQ(a.Stats().stored_objects, 2u);
  l1_.ExpectBalanced();
}

TEST_F(StoreControllerTest, ObjectsGoneBeforeTheirTurnAreSkipped) {
  MockAdapter a({});
  auto controller = Controller({&a});
  for (std::uint64_t i = 0; i < 4; ++i) l1_.Store(KeyN(i), kObject, i);
  l1_.table().Clear(/*force=*/false);
  controller->Start();
  ASSERT_TRUE(controller->WaitIdle(kWait));
  EXPECT_EQ(controller->Stats().skipped_gone, 4u);
  EXPECT_EQ(a.Stats().stored_objects, 0u);
}

TEST_F(StoreControllerTest, SkipL1DeletesFromL1WhatEveryAdapterStored) {
  MockAdapter a({});
  StoreControllerConfig config;
  config.policy = StorePolicy::kSkipL1;
  auto controller = Controller({&a}, config);
  controller->Start();
  for (std::uint64_t i = 0; i < 3; ++i) l1_.Store(KeyN(i), kObject, i);
  ASSERT_TRUE(controller->WaitIdle(kWait));
  EXPECT_EQ(l1_.table().Stats().resident_objects, 0u);
  EXPECT_EQ(controller->Stats().deleted_from_l1, 3u);
  EXPECT_TRUE(Holds(a, KeyN(2), 2));
}

TEST_F(StoreControllerTest, FailuresAreCountedNotRetriedAndKeepL1UnderSkipL1) {
  FaultConfig faults;
  faults.store_failure_rate = 1.0;
  FaultAdapter failing(std::make_unique<MockAdapter>(MockAdapterConfig{}), faults);
  StoreControllerConfig config;
  config.policy = StorePolicy::kSkipL1;
  auto controller = Controller({&failing}, config);
  controller->Start();
  for (std::uint64_t i = 0; i < 3; ++i) l1_.Store(KeyN(i), kObject, i);
  ASSERT_TRUE(controller->WaitIdle(kWait));
  EXPECT_EQ(controller->Stats().failed, 3u);
  EXPECT_EQ(l1_.table().Stats().resident_objects, 3u);  // not in L2, so not dropped from L1
  l1_.ExpectBalanced();
}

// Stores wait at a gate (fakes/gated_adapter.h): which are in flight at
// Stop() is then the test's choice, not the scheduler's (under TSan a timed
// version saw every store finish before its Stop).
TEST_F(StoreControllerTest, StoppingWithStoresInFlightLeavesNoLockBehind) {
  MockAdapter a({});
  testing::GatedAdapter gated(&a, testing::GatedAdapter::Gated::kStore);
  StoreControllerConfig config;
  config.batch_objects = 2;
  config.workers = 2;
  auto controller = Controller({&gated}, config);
  controller->Start();
  for (std::uint64_t i = 0; i < 20; ++i) l1_.Store(KeyN(i), kObject, i);
  // Both workers hold a batch (of one or two: a worker wakes at the first
  // object queued) in the adapter; the rest wait in the queue.
  WaitUntil([&] { return gated.entered() >= 2; });
  ASSERT_EQ(gated.entered(), 2);
  const std::uint64_t in_flight = controller->Stats().in_flight;
  ASSERT_GE(in_flight, 2u);
  ASSERT_LE(in_flight, 4u);
  std::thread stopping([&] { controller->Stop(); });
  // Stop drops the queue at once, then waits for the batches in flight.
  EXPECT_TRUE(WaitUntil([&] { return controller->Stats().dropped_at_stop != 0; }))
      << "Stop never dropped the queue";
  gated.Open();
  stopping.join();
  const StoreControllerStats s = controller->Stats();
  EXPECT_EQ(s.dropped_at_stop, 20u - in_flight);
  EXPECT_EQ(s.stored, in_flight);  // the batches in flight finished
  EXPECT_EQ(s.in_flight, 0u);
  l1_.ExpectBalanced();
}

}  // namespace
}  // namespace lmcache::tier
