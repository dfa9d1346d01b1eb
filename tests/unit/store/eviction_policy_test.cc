#include "store/eviction_policy.h"

#include <gtest/gtest.h>

#include "fakes/keys.h"

namespace lmcache::store {
namespace {

using testing::KeyN;
using testing::KeysN;

TEST(LruPolicy, TailOfAPrefixIsEvictedBeforeItsHead) {
  LruPolicy lru;
  lru.OnAdmitted(KeysN(0, 4));  // chunks 0..3 of one prompt
  const auto order = lru.Candidates(0, 10);
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], KeyN(3));
  EXPECT_EQ(order[3], KeyN(0));
}

TEST(LruPolicy, AccessMakesMostRecentAndIgnoresUnknownKeys) {
  LruPolicy lru;
  lru.OnAdmitted(KeysN(0, 1));
  lru.OnAdmitted(KeysN(1, 1));
  lru.OnAdmitted(KeysN(2, 1));
  lru.OnAccessed(std::vector{KeyN(0), KeyN(99)});
  const auto order = lru.Candidates(0, 10);
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0], KeyN(1));
  EXPECT_EQ(order[1], KeyN(2));
  EXPECT_EQ(order[2], KeyN(0));
  EXPECT_EQ(lru.size(), 3u);
}

TEST(LruPolicy, RemoveAndSkip) {
  LruPolicy lru;
  for (int i = 0; i < 5; ++i) lru.OnAdmitted(KeysN(i, 1));
  lru.OnRemoved(std::vector{KeyN(0), KeyN(42)});
  EXPECT_EQ(lru.size(), 4u);
  const auto page = lru.Candidates(2, 10);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0], KeyN(3));
  EXPECT_TRUE(lru.Candidates(10, 10).empty());
  EXPECT_EQ(lru.Candidates(0, 1).size(), 1u);
}

TEST(EvictionPolicy, FactoryAcceptsKnownNamesOnly) {
  EXPECT_EQ((*MakeEvictionPolicy("LRU"))->name(), "LRU");
  EXPECT_EQ((*MakeEvictionPolicy("lru"))->name(), "LRU");
  auto noop = MakeEvictionPolicy("noop");
  ASSERT_TRUE(noop.ok());
  (*noop)->OnAdmitted(KeysN(0, 3));
  EXPECT_TRUE((*noop)->Candidates(0, 10).empty());
  auto bad = MakeEvictionPolicy("ARC");
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidConfig);
  EXPECT_NE(bad.status().message().find("--eviction-policy"), std::string::npos);
}

}  // namespace
}  // namespace lmcache::store
