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

ObjectKey SaltedKey(std::uint64_t n, const std::string& salt) {
  ObjectKey key = KeyN(n);
  key.cache_salt = salt;
  return key;
}

// Each tenant's own order is the global order restricted to its keys, with
// or without a per-tenant list behind it.
TEST(LruPolicy, TenantCandidatesFollowTheGlobalOrderOfThatTenantsKeys) {
  for (const bool per_tenant : {true, false}) {
    LruPolicy lru(per_tenant);
    lru.OnAdmitted(std::vector{SaltedKey(0, "a"), SaltedKey(1, "a")});  // 1 is older than 0
    lru.OnAdmitted(std::vector{SaltedKey(2, "b")});
    lru.OnAdmitted(std::vector{SaltedKey(3, "a"), SaltedKey(4, "b")});
    lru.OnAccessed(std::vector{SaltedKey(1, "a")});
    const auto a = lru.TenantCandidates("a", 0, 10);
    ASSERT_EQ(a.size(), 3u) << per_tenant;
    EXPECT_EQ(a[0], SaltedKey(0, "a"));
    EXPECT_EQ(a[1], SaltedKey(3, "a"));
    EXPECT_EQ(a[2], SaltedKey(1, "a"));
    const auto b = lru.TenantCandidates("b", 1, 10);  // skipping the oldest
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0], SaltedKey(4, "b"));
    EXPECT_TRUE(lru.TenantCandidates("nobody", 0, 10).empty());
    EXPECT_EQ(lru.TenantCandidates("a", 0, 2).size(), 2u);
    lru.OnRemoved(std::vector{SaltedKey(0, "a"), SaltedKey(3, "a"), SaltedKey(1, "a")});
    EXPECT_TRUE(lru.TenantCandidates("a", 0, 10).empty());
    EXPECT_EQ(lru.size(), 2u);
    lru.OnAdmitted(std::vector{SaltedKey(5, "a")});  // a tenant that emptied comes back
    ASSERT_EQ(lru.TenantCandidates("a", 0, 10).size(), 1u);
    EXPECT_EQ(lru.Candidates(0, 10).back(), SaltedKey(5, "a"));
  }
}

// The last uses the evictor's last-copy bias bounds itself by: one use per
// key admitted or accessed, increasing along the order.
TEST(LruPolicy, UsedCandidatesCarryEachKeysLastUse) {
  LruPolicy lru;
  lru.OnAdmitted(KeysN(0, 3));  // uses 1..3, the batch's head last: 2, 1, 0
  lru.OnAdmitted(KeysN(3, 1));  // use 4
  lru.OnAccessed(std::vector{KeyN(1), KeyN(77)});  // use 5; the unknown key uses nothing
  const auto used = lru.UsedCandidates(0, 10);
  ASSERT_EQ(used.size(), 4u);
  const std::vector<ObjectKey> keys = {KeyN(2), KeyN(0), KeyN(3), KeyN(1)};
  const std::vector<std::uint64_t> uses = {1, 3, 4, 5};
  for (std::size_t i = 0; i < used.size(); ++i) {
    EXPECT_EQ(used[i].key, keys[i]) << i;
    EXPECT_EQ(used[i].last_use, uses[i]) << i;
  }
  const auto skipped = lru.UsedCandidates(2, 1);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].key, KeyN(3));
  EXPECT_TRUE(lru.UsedCandidates(4, 10).empty());
  EXPECT_TRUE(NoopPolicy().UsedCandidates(0, 10).empty());
}

// A key admitted again (a store of a chunk already resident elsewhere in the
// batch's order) is one node: moved to the most recent end with the next
// use, once in its tenant's order, and removed whole.
TEST(LruPolicy, AKeyAdmittedAgainStaysOneNode) {
  LruPolicy lru;
  lru.OnAdmitted(std::vector{SaltedKey(0, "a"), SaltedKey(1, "a"), SaltedKey(2, "a")});  // 3 uses
  lru.OnAdmitted(std::vector{SaltedKey(3, "a"), SaltedKey(0, "a")});  // 0: use 4; 3: use 5
  EXPECT_EQ(lru.size(), 4u);
  const auto used = lru.UsedCandidates(0, 10);
  ASSERT_EQ(used.size(), 4u);
  const std::vector<ObjectKey> keys = {SaltedKey(2, "a"), SaltedKey(1, "a"), SaltedKey(0, "a"),
                                       SaltedKey(3, "a")};
  const std::vector<std::uint64_t> uses = {1, 2, 4, 5};
  for (std::size_t i = 0; i < used.size(); ++i) {
    EXPECT_EQ(used[i].key, keys[i]) << i;
    EXPECT_EQ(used[i].last_use, uses[i]) << i;
  }
  EXPECT_EQ(lru.TenantCandidates("a", 0, 10),
            (std::vector<ObjectKey>{keys[0], keys[1], keys[2], keys[3]}));
  lru.OnRemoved(std::vector{SaltedKey(0, "a")});
  EXPECT_EQ(lru.size(), 3u);
  EXPECT_EQ(lru.TenantCandidates("a", 0, 10), (std::vector<ObjectKey>{keys[0], keys[1], keys[3]}));
  lru.OnAccessed(std::vector{SaltedKey(0, "a")});  // gone: no use, no node
  EXPECT_EQ(lru.size(), 3u);
}

TEST(EvictionPolicy, FactoryAcceptsKnownNamesOnly) {
  EXPECT_EQ((*MakeEvictionPolicy("LRU"))->name(), "LRU");
  EXPECT_EQ((*MakeEvictionPolicy("lru"))->name(), "LRU");
  auto noop = MakeEvictionPolicy("noop");
  ASSERT_TRUE(noop.ok());
  (*noop)->OnAdmitted(KeysN(0, 3));
  EXPECT_TRUE((*noop)->Candidates(0, 10).empty());
  EXPECT_TRUE((*noop)->TenantCandidates("", 0, 10).empty());
  auto bad = MakeEvictionPolicy("ARC");
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidConfig);
  EXPECT_NE(bad.status().message().find("--eviction-policy"), std::string::npos);
}

}  // namespace
}  // namespace lmcache::store
