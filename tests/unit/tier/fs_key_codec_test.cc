// FsKeyCodec: the reference's file names, and a bounded name for long keys.
#include "tier/fs/fs_key_codec.h"

#include <gtest/gtest.h>

#include "fakes/keys.h"

namespace lmcache::tier {
namespace {

TEST(FsKeyCodecTest, ReferenceFormat) {
  store::ObjectKey key = testing::KeyN(1, "meta-llama/Llama-3.1-8B");
  key.kv_rank = 0x01000100;
  key.object_group_id = 10;
  const std::string name = ObjectFileName(key);
  EXPECT_EQ(name.rfind("meta-llama-SEP-Llama-3.1-8B@0x01000100@a@01000000", 0), 0u) << name;
  EXPECT_TRUE(name.ends_with("5a.data")) << name;
  EXPECT_EQ(name.find('/'), std::string::npos);
  key.cache_salt = "tenant";
  EXPECT_TRUE(ObjectFileName(key).ends_with("5a@tenant.data"));
}

TEST(FsKeyCodecTest, DistinctKeysGetDistinctNames) {
  store::ObjectKey a = testing::KeyN(1);
  store::ObjectKey b = a;
  b.kv_rank = 1;
  store::ObjectKey c = a;
  c.cache_salt = "x";
  store::ObjectKey d = testing::KeyN(2);
  EXPECT_NE(ObjectFileName(a), ObjectFileName(b));
  EXPECT_NE(ObjectFileName(a), ObjectFileName(c));
  EXPECT_NE(ObjectFileName(a), ObjectFileName(d));
}

// Request tags are in the name (as the reference's fs adapter encodes them);
// no salt, which holds no '@', can spell the same name as a tag set.
TEST(FsKeyCodecTest, TagsAreInTheNameAndNoSaltCanSpellThem) {
  store::ObjectKey plain = testing::KeyN(1);
  store::ObjectKey tagged = plain;
  tagged.tags = "tenant%a";
  store::ObjectKey salted = plain;
  salted.cache_salt = "Ttenant%a";
  EXPECT_TRUE(ObjectFileName(tagged).ends_with("@@Ttenant%a.data")) << ObjectFileName(tagged);
  EXPECT_NE(ObjectFileName(tagged), ObjectFileName(plain));
  EXPECT_NE(ObjectFileName(tagged), ObjectFileName(salted));
  EXPECT_EQ(ObjectFileName(tagged).find('/'), std::string::npos);
}

TEST(FsKeyCodecTest, ALongNameIsHashedToAValidFileName) {
  store::ObjectKey a = testing::KeyN(1, std::string(300, 'm'));
  store::ObjectKey b = testing::KeyN(1, std::string(299, 'm') + "n");
  const std::string name = ObjectFileName(a);
  EXPECT_LE(name.size(), 255u);
  EXPECT_EQ(name.rfind("h-", 0), 0u);
  EXPECT_TRUE(name.ends_with(".data"));
  EXPECT_NE(name, ObjectFileName(b));
}

}  // namespace
}  // namespace lmcache::tier
