#include "store/object_key.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

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
  ObjectKey tagged = base;
  tagged.tags = "tenant%a";
  std::unordered_set<ObjectKey, ObjectKeyHash> set{base,        other_rank, other_group, other_salt,
                                                   other_model, tagged,     base};
  EXPECT_EQ(set.size(), 6u);
  EXPECT_TRUE(ValidateObjectKey(base).ok());
  ObjectKey negative = base;
  negative.kv_rank = -1;
  EXPECT_FALSE(ValidateObjectKey(negative).ok());
}

// A batch's check gives the first bad key's error, as checking each key in
// turn does, whatever is bad and wherever: the strings of a key that repeats
// the one before are checked once, its numbers always.
TEST(ObjectKey, ABatchIsCheckedAsEachOfItsKeys) {
  const auto first_error = [](const std::vector<ObjectKey>& keys) {
    for (const ObjectKey& key : keys) {
      if (Status status = ValidateObjectKey(key); !status.ok()) return status.ToString();
    }
    return Status::Ok().ToString();
  };
  const std::vector<ObjectKey> good = testing::KeysN(0, 4);
  std::vector<std::vector<ObjectKey>> batches{good, {}};
  for (std::size_t at = 0; at < good.size(); ++at) {
    for (int spoil = 0; spoil < 5; ++spoil) {
      std::vector<ObjectKey> keys = good;
      ObjectKey& key = keys[at];
      if (spoil == 0) key.model_name = "a@b";
      if (spoil == 1) key.cache_salt = "a/b";
      if (spoil == 2) key.tags = "no-percent";
      if (spoil == 3) key.kv_rank = -1;
      if (spoil == 4) {
        key.object_group_id = -1;
        key.cache_salt = "tenant";  // other strings, good ones
      }
      batches.push_back(keys);
    }
  }
  for (const auto& keys : batches) {
    EXPECT_EQ(ValidateObjectKeys(keys).ToString(), first_error(keys));
  }
  EXPECT_TRUE(ValidateObjectKeys(good).ok());
}

// Request tags under the reference's rules (docs/source/mp/request_tags.rst:
// names and values at most 128 characters, none of '@', '%', '/', '\\', NUL;
// sorted, so the order a request map lists them in does not matter).
TEST(ObjectKey, TagsAreCanonicalSortedAndCheckedByTheReferencesRules) {
  const std::map<std::string, std::string> tags = {{"tenant", "tenant-a"},
                                                   {"application_version", "v2"}};
  EXPECT_TRUE(ValidateTags(tags).ok());
  const std::string canonical = CanonicalTags(tags);
  EXPECT_EQ(canonical, "application_version%v2%tenant%tenant-a");
  EXPECT_TRUE(ValidateCanonicalTags(canonical).ok());
  EXPECT_TRUE(ValidateCanonicalTags("").ok());
  EXPECT_TRUE(ValidateCanonicalTags("a%").ok());  // one tag, an empty value
  EXPECT_EQ(CanonicalTags({}), "");
  EXPECT_TRUE(ValidateTags({{"empty-value", ""}}).ok());

  for (const std::string& bad : std::vector<std::string>{"a@b", "a%b", "a/b", "a\\b",
                                                          std::string("a\0b", 3)}) {
    EXPECT_EQ(ValidateTags({{"t", bad}}).code(), ErrorCode::kInvalidKey) << bad;
    EXPECT_EQ(ValidateTags({{bad, "v"}}).code(), ErrorCode::kInvalidKey) << bad;
  }
  EXPECT_EQ(ValidateTags({{"", "v"}}).code(), ErrorCode::kInvalidKey);
  EXPECT_TRUE(ValidateTags({{"t", std::string(128, 'x')}}).ok());
  EXPECT_EQ(ValidateTags({{"t", std::string(129, 'x')}}).code(), ErrorCode::kInvalidKey);
  std::map<std::string, std::string> many;
  for (std::size_t i = 0; i <= kMaxTags; ++i) many[std::to_string(100 + i)] = "v";
  EXPECT_EQ(ValidateTags(many).code(), ErrorCode::kInvalidKey);
  // What a corrupt L2 header could name: odd parts, unsorted, a bad name.
  EXPECT_FALSE(ValidateCanonicalTags("a").ok());
  EXPECT_FALSE(ValidateCanonicalTags("b%1%a%2").ok());
  EXPECT_FALSE(ValidateCanonicalTags("a%1%a%2").ok());
  EXPECT_FALSE(ValidateCanonicalTags("%1").ok());
  ObjectKey key = testing::KeyN(1);
  key.tags = "b%1%a%2";
  EXPECT_EQ(ValidateObjectKey(key).code(), ErrorCode::kInvalidKey);
  key.tags = "a%2%b%1";
  EXPECT_TRUE(ValidateObjectKey(key).ok());
}

}  // namespace
}  // namespace lmcache::store
