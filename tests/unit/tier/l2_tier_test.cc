// L2Tier: the assembled tier, store and prefetch controllers on one table.
// Reference #5032: a failed load's cleanup finished the write and then
// deleted, so the store controller copied never-loaded bytes to L2. Here a
// load that fails in the middle of a batch admits only what loaded, nothing
// of it is written back to L2, L2's own objects are untouched, and no lock,
// lock or staged byte is left.
#include "tier/l2_tier.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "fakes/keys.h"
#include "fakes/l1_table.h"
#include "tier/metered_adapter.h"
#include "tier/mock/mock_adapter.h"

namespace lmcache::tier {
namespace {

using testing::KeysN;
constexpr std::size_t kObject = 128 * 1024;
constexpr auto kWait = std::chrono::seconds(30);

TEST(L2Tier, ALoadFailingMidBatchAdmitsOnlyWhatLoadedAndWritesNothingBack) {
  testing::L1Table l1(16 << 20);
  L2Config config;
  auto spec = ParseL2AdapterSpec(R"({"type":"mock"})", 1);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  config.adapters.push_back(*spec);
  config.prefetch.chunks_per_batch = 4;
  auto tier = L2Tier::Create(config, &l1.table());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  (*tier)->Start();

  // Six chunks written through L1 to L2, then out of L1.
  const auto keys = KeysN(0, 6);
  for (std::size_t i = 0; i < keys.size(); ++i) l1.Store(keys[i], kObject, i);
  ASSERT_TRUE((*tier)->store_controller().WaitIdle(kWait));
  ASSERT_EQ((*tier)->Stats().store.stored, 6u);
  for (const auto& key : keys) ASSERT_EQ(l1.table().Delete({&key, 1}, true)[0], store::DeleteOutcome::kDeleted);
  // The tier meters every adapter it builds; the mock is inside.
  auto& metered = dynamic_cast<MeteredAdapter&>((*tier)->adapter(0));
  auto& mock = dynamic_cast<MockAdapter&>(metered.inner());
  ASSERT_TRUE(mock.CorruptForTest(keys[2]));  // the middle of the first batch of four

  PrefetchRequest request;
  request.keys = keys;
  request.object_bytes = kObject;
  request.owner = store::Owner::Session(5);
  Prefetcher* prefetcher = (*tier)->prefetcher();
  auto* controller = dynamic_cast<PrefetchController*>(prefetcher);
  ASSERT_NE(controller, nullptr);
  const auto landed = controller->Wait(prefetcher->Submit(request), kWait);
  ASSERT_TRUE(landed);
  EXPECT_EQ(landed->chunks, 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(l1.Read(keys[i]), testing::ObjectBytes(kObject, i));
  for (std::size_t i = 2; i < 6; ++i) EXPECT_FALSE(l1.table().Find(keys[i])) << i;
  EXPECT_EQ(l1.allocator().UsedBytes(), 2 * l1.allocator().AlignedSize(kObject));
  l1.table().ReleaseRead(landed->lease);

  ASSERT_TRUE((*tier)->store_controller().WaitIdle(kWait));
  const L2Stats stats = (*tier)->Stats();
  EXPECT_EQ(stats.store.stored, 6u) << "nothing loaded (or not) was written back";
  EXPECT_EQ(stats.prefetch.loaded_chunks, 2u);
  EXPECT_EQ(stats.prefetch.load_failed_chunks, 4u);
  // L2 still serves the intact objects after the failed one (its locks released).
  std::vector<std::byte> out(kObject);
  const std::vector<L2Read> reads = {{&keys[4], out}};
  EXPECT_EQ(mock.Load(reads)[0], L2LoadOutcome::kLoaded);
  EXPECT_EQ(out, testing::ObjectBytes(kObject, 4));
  (*tier)->Stop();
  l1.ExpectBalanced();
}

// Every adapter is shown the L1 pool once, before it is used, through the
// meter the tier wraps it in (AttachMemory, for devices that register memory).
TEST(L2Tier, ShowsEachAdapterTheWholeL1PoolBeforeUse) {
  testing::L1Table l1(16 << 20);
  L2Config config;
  for (int i = 0; i < 2; ++i) {
    auto spec = ParseL2AdapterSpec(R"({"type":"mock"})", i + 1);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    config.adapters.push_back(*spec);
  }
  auto tier = L2Tier::Create(config, &l1.table());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  for (std::size_t a = 0; a < 2; ++a) {
    auto& mock = dynamic_cast<MockAdapter&>(dynamic_cast<MeteredAdapter&>((*tier)->adapter(a)).inner());
    EXPECT_EQ(mock.attached_bytes(), l1.allocator().capacity_bytes()) << a;
    EXPECT_EQ(l1.table().PoolBytes().size(), l1.allocator().capacity_bytes());
  }
}

}  // namespace
}  // namespace lmcache::tier
