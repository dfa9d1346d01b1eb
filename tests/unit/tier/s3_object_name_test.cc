#include "tier/s3/s3_object_name.h"

#include <gtest/gtest.h>

#include "fakes/keys.h"

namespace lmcache::tier {
namespace {

store::ObjectKey Key() {
  store::ObjectKey key;
  for (std::size_t i = 0; i < key.chunk_hash.size(); ++i)
    key.chunk_hash[i] = static_cast<std::uint8_t>(i * 7);
  key.model_name = "meta-llama/Llama-3.1-8B";
  key.kv_rank = 0x10002;
  key.object_group_id = 3;
  return key;
}

// The reference's own format (s3_l2_adapter.py _object_key_to_string):
// f"{model}@{kv_rank:08x}@{object_group_id:x}@{chunk_hash.hex()}[@{salt}]".
TEST(S3ObjectNameTest, ReferenceKeysGetTheReferenceName) {
  store::ObjectKey key = Key();
  const std::string hash = "00070e151c232a31383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9";
  EXPECT_EQ(S3ObjectName("", key), "meta-llama/Llama-3.1-8B@00010002@3@" + hash);
  key.cache_salt = "tenant-a";
  EXPECT_EQ(S3ObjectName("p/", key), "p/meta-llama/Llama-3.1-8B@00010002@3@" + hash + "@tenant-a");
}

TEST(S3ObjectNameTest, EveryKeyRoundTrips) {
  std::vector<store::ObjectKey> keys;
  store::ObjectKey key = Key();
  keys.push_back(key);
  key.cache_salt = "s";
  keys.push_back(key);
  key.layout_namespace = 7;
  keys.push_back(key);
  key.cache_salt.clear();
  keys.push_back(key);
  key.tags = store::CanonicalTags({{"team", "a"}, {"zone", "b"}});
  keys.push_back(key);
  key.layout_namespace = 0;
  keys.push_back(key);
  key.kv_rank = -1;  // every bit of the packed rank
  key.object_group_id = -2;
  keys.push_back(key);
  for (const auto& k : keys) {
    for (const std::string prefix : {"", "lmcache/", "a@b"}) {
      const std::string name = S3ObjectName(prefix, k);
      const auto parsed = ParseS3ObjectName(prefix, name);
      ASSERT_TRUE(parsed.has_value()) << name;
      EXPECT_EQ(*parsed, k) << name;
    }
  }
}

TEST(S3ObjectNameTest, OtherShapesAreNotOurs) {
  const std::string good = S3ObjectName("", Key());
  EXPECT_TRUE(ParseS3ObjectName("", good).has_value());
  EXPECT_FALSE(ParseS3ObjectName("x/", good).has_value());  // another prefix
  for (const std::string& name :
       {std::string("readme.txt"), std::string("m@1@2@3"), good + "@",  // empty salt, nothing after
        good + "@s@X1", good + "@s@L", good + "@s@L1@T", good + "@s@L1@Tx@y",
        std::string("m@0001@3@") + std::string(64, '0'),      // short rank
        std::string("m@00000001@3@") + std::string(64, 'A'),  // upper-case hash
        std::string("m@00000001@3@") + std::string(62, '0'),
        std::string("@00000001@3@") + std::string(64, '0')}) {
    EXPECT_FALSE(ParseS3ObjectName("", name).has_value()) << name;
  }
}

TEST(S3ObjectNameTest, LongNamesAreHashedAndNotListedBack) {
  store::ObjectKey key = Key();
  key.model_name = std::string(1000, 'm');
  const std::string name = S3ObjectName("pre/", key);
  EXPECT_LE(name.size(), kMaxS3ObjectName);
  EXPECT_TRUE(name.starts_with("pre/h-"));
  EXPECT_EQ(name.size(), std::string("pre/h-").size() + 32);
  EXPECT_FALSE(ParseS3ObjectName("pre/", name).has_value());
  key.kv_rank = 1;
  EXPECT_NE(S3ObjectName("pre/", key), name);
}

}  // namespace
}  // namespace lmcache::tier
