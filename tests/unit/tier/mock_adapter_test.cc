// MockAdapter: a verified in-memory tier with capacity (LRU) and locks.
#include "tier/mock/mock_adapter.h"

#include <gtest/gtest.h>

#include <vector>

#include "fakes/keys.h"

namespace lmcache::tier {
namespace {

using testing::KeyN;

std::vector<std::byte> Bytes(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<unsigned char>(i + seed));
  return v;
}

TEST(MockAdapterTest, StoresAndLoadsVerifiedBytes) {
  MockAdapter mock({});
  const auto key = KeyN(1);
  const auto bytes = Bytes(4096, 3);
  const std::vector<L2Write> writes = {{&key, bytes}};
  ASSERT_TRUE(mock.Store(writes)[0].ok());
  const std::vector<store::ObjectKey> keys = {key, KeyN(2)};
  EXPECT_EQ(mock.LookupAndLock(keys), (std::vector<bool>{true, false}));
  std::vector<std::byte> out(4096);
  const std::vector<L2Read> reads = {{&key, out}};
  EXPECT_EQ(mock.Load(reads)[0], L2LoadOutcome::kLoaded);
  EXPECT_EQ(out, bytes);
  mock.Unlock(keys);
  std::vector<std::byte> wrong_size(100);
  const std::vector<L2Read> other_layout = {{&key, wrong_size}};
  EXPECT_EQ(mock.Load(other_layout)[0], L2LoadOutcome::kMissing);
  const L2AdapterStats s = mock.Stats();
  EXPECT_EQ(s.stored_objects, 1u);
  EXPECT_EQ(s.loaded_objects, 1u);
  EXPECT_EQ(s.load_misses, 1u);
}

TEST(MockAdapterTest, ACorruptObjectIsAMissAndIsDeleted) {
  MockAdapter mock({});
  const auto key = KeyN(1);
  const auto bytes = Bytes(1024, 1);
  const std::vector<L2Write> writes = {{&key, bytes}};
  ASSERT_TRUE(mock.Store(writes)[0].ok());
  ASSERT_TRUE(mock.CorruptForTest(key));
  std::vector<std::byte> out(1024);
  const std::vector<L2Read> reads = {{&key, out}};
  EXPECT_EQ(mock.Load(reads)[0], L2LoadOutcome::kCorrupt);
  EXPECT_EQ(mock.Load(reads)[0], L2LoadOutcome::kMissing);
  EXPECT_EQ(mock.Stats().checksum_failures, 1u);
  EXPECT_EQ(mock.Stats().objects, 0u);
}

TEST(MockAdapterTest, CapacityEvictsTheLeastRecentlyUsed) {
  MockAdapterConfig config;
  config.max_size_bytes = 3 * (4096 + 256);
  MockAdapter mock(config);
  const auto bytes = Bytes(4096, 0);
  std::vector<store::ObjectKey> keys;
  for (int i = 0; i < 5; ++i) keys.push_back(KeyN(static_cast<std::uint64_t>(i)));
  for (const auto& key : keys) {
    const std::vector<L2Write> writes = {{&key, bytes}};
    ASSERT_TRUE(mock.Store(writes)[0].ok());
  }
  const L2AdapterStats s = mock.Stats();
  EXPECT_EQ(s.objects, 3u);
  EXPECT_EQ(s.evicted_objects, 2u);
  EXPECT_LE(s.usage_bytes, config.max_size_bytes);
  EXPECT_EQ(mock.LookupAndLock(keys), (std::vector<bool>{false, false, true, true, true}));
}

}  // namespace
}  // namespace lmcache::tier
