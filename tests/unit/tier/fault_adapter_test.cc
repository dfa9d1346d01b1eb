// FaultAdapter: the configured fraction of operations fails, and a failed load
// never reports usable bytes.
#include "tier/fault/fault_adapter.h"

#include <gtest/gtest.h>

#include <vector>

#include "fakes/keys.h"
#include "tier/mock/mock_adapter.h"

namespace lmcache::tier {
namespace {

TEST(FaultAdapterTest, FailsAboutTheConfiguredFraction) {
  FaultConfig faults;
  faults.store_failure_rate = 0.25;
  faults.seed = 7;
  FaultAdapter adapter(std::make_unique<MockAdapter>(MockAdapterConfig{}), faults);
  std::vector<std::byte> bytes(64, std::byte{1});
  std::vector<store::ObjectKey> keys = testing::KeysN(0, 2000);
  std::vector<L2Write> writes;
  for (const auto& key : keys) writes.push_back({&key, bytes});
  int failed = 0;
  for (const Status& s : adapter.Store(writes)) failed += s.ok() ? 0 : 1;
  EXPECT_GT(failed, 400);
  EXPECT_LT(failed, 600);
  EXPECT_EQ(adapter.Stats().stored_objects, 2000u - static_cast<unsigned>(failed));
  EXPECT_EQ(adapter.Stats().type, "fault_inject(mock)");
}

TEST(FaultAdapterTest, DelaysAboutTheConfiguredFractionOfCalls) {
  FaultConfig faults;
  faults.delay_ms = 1;
  faults.delay_rate = 0.3;
  faults.seed = 3;
  FaultAdapter adapter(std::make_unique<MockAdapter>(MockAdapterConfig{}), faults);
  const std::vector<store::ObjectKey> keys = testing::KeysN(0, 1);
  for (int i = 0; i < 200; ++i) (void)adapter.LookupAndLock(keys);
  EXPECT_GT(adapter.delayed(), 30u);
  EXPECT_LT(adapter.delayed(), 90u);
  faults.delay_rate = 0;
  FaultAdapter never(std::make_unique<MockAdapter>(MockAdapterConfig{}), faults);
  for (int i = 0; i < 50; ++i) (void)never.LookupAndLock(keys);
  EXPECT_EQ(never.delayed(), 0u);
}

// The prefetch controller looks up through SubmitLookup: a failed lookup
// must fail there too (wrapping an adapter that answers on its own thread
// or inline alike), not only through the synchronous LookupAndLock.
TEST(FaultAdapterTest, AFailedLookupFailsThroughTheAsynchronousLookupToo) {
  FaultConfig faults;
  faults.lookup_failure_rate = 1.0;
  auto mock = std::make_unique<MockAdapter>(MockAdapterConfig{});
  const auto key = testing::KeyN(1);
  std::vector<std::byte> bytes(64, std::byte{1});
  const std::vector<L2Write> writes = {{&key, bytes}};
  ASSERT_TRUE(mock->Store(writes)[0].ok());
  FaultAdapter adapter(std::move(mock), faults);
  const std::vector<store::ObjectKey> keys = {key};
  std::vector<bool> found;
  adapter.SubmitLookup(keys, bytes.size(), [&found](std::vector<bool> f) { found = std::move(f); });
  EXPECT_EQ(found, std::vector<bool>{false});
  EXPECT_EQ(adapter.LookupAndLock(keys), std::vector<bool>{false});
}

TEST(FaultAdapterTest, AFailedLoadIsReportedAndItsBufferIsScribbled) {
  FaultConfig faults;
  faults.load_failure_rate = 1.0;
  FaultAdapter adapter(std::make_unique<MockAdapter>(MockAdapterConfig{}), faults);
  const auto key = testing::KeyN(1);
  std::vector<std::byte> bytes(64, std::byte{1});
  const std::vector<L2Write> writes = {{&key, bytes}};
  ASSERT_TRUE(adapter.Store(writes)[0].ok());
  std::vector<std::byte> out(64);
  const std::vector<L2Read> reads = {{&key, out}};
  EXPECT_EQ(adapter.Load(reads)[0], L2LoadOutcome::kFailed);
  EXPECT_NE(out, bytes);
}

}  // namespace
}  // namespace lmcache::tier
