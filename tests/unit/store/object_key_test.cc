#include "store/object_key.h"

#include <gtest/gtest.h>

#include <unordered_set>

#include "fakes/keys.h"

namespace lmcache::store {
namespace {

TEST(ObjectKey, ModelNameRules) {
  EXPECT_TRUE(ValidateModelName("meta-llama/Llama-3.1-8B").ok());
  EXPECT_EQ(ValidateModelName("").code(), ErrorCode::kInvalidKey);
  EXPECT_EQ(ValidateModelName("a@b").code(), ErrorCode::kInvalidKey);
  EXPECT_EQ(ValidateModelName(std::string("a\0b", 3)).code(), ErrorCode::kInvalidKey);
}

TEST(ObjectKey, CacheSaltRules) {
  EXPECT_TRUE(ValidateCacheSalt("").ok());
  EXPECT_TRUE(ValidateCacheSalt(std::string(128, 'x')).ok());
  EXPECT_FALSE(ValidateCacheSalt(std::string(129, 'x')).ok());
  for (const char* bad : {"a@b", "a/b", "a\\b"}) {
    EXPECT_EQ(ValidateCacheSalt(bad).code(), ErrorCode::kInvalidKey) << bad;
  }
  EXPECT_FALSE(ValidateCacheSalt(std::string("a\0b", 3)).ok());
}

TEST(ObjectKey, KvRankPackingMatchesReference) {
  // (ws << 24) | (rank << 16) | (ws << 8) | rank
  EXPECT_EQ(*PackKvRank(1, 0), (1 << 24) | (1 << 8));
  EXPECT_EQ(*PackKvRank(4, 3), (4 << 24) | (3 << 16) | (4 << 8) | 3);
  EXPECT_FALSE(PackKvRank(4, 4).ok());
  EXPECT_FALSE(PackKvRank(0, 0).ok());
  EXPECT_FALSE(PackKvRank(256, 0).ok());
  EXPECT_FALSE(PackKvRank(2, -1).ok());
}

TEST(ObjectKey, EveryFieldTakesPartInIdentity) {
  const ObjectKey base = testing::KeyN(7);
  ObjectKey other_rank = base;
  other_rank.kv_rank = 5;
  ObjectKey other_group = base;
  other_group.object_group_id = 1;
  ObjectKey other_salt = base;
  other_salt.cache_salt = "tenant";
  ObjectKey other_model = base;
  other_model.model_name = "n";
  std::unordered_set<ObjectKey, ObjectKeyHash> set{base,       other_rank,  other_group,
                                                   other_salt, other_model, base};
  EXPECT_EQ(set.size(), 5u);
  EXPECT_TRUE(ValidateObjectKey(base).ok());
  ObjectKey negative = base;
  negative.kv_rank = -1;
  EXPECT_FALSE(ValidateObjectKey(negative).ok());
}

}  // namespace
}  // namespace lmcache::store
