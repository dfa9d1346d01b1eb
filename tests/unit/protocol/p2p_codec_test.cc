// The P2P operations' payloads (p2p-spec.md section 4.2), decoded from bytes
// assembled here by hand the way msgspec writes the reference's dataclasses
// (maps keyed by field name, in field order; ints in their smallest form;
// bytes as bin), not by our encoder; then our encoder against the same
// decoder, and every bound a peer could push past.
#include "protocol/p2p_codec.h"

#include <gtest/gtest.h>

#include <type_traits>

#include "common/msgpack_codec.h"

#include <string>

namespace lmcache::protocol {
namespace {

// A msgpack byte string written one element at a time.
class Bytes {
 public:
  Bytes& Raw(std::initializer_list<int> bytes) {
    for (int b : bytes) out_.push_back(static_cast<char>(b));
    return *this;
  }
  Bytes& FixStr(std::string_view s) {  // 0xa0 | length, for length < 32
    out_.push_back(static_cast<char>(0xa0 | s.size()));
    out_.append(s);
    return *this;
  }
  Bytes& Bin8(std::string_view s) {  // 0xc4, length, bytes
    Raw({0xc4, static_cast<int>(s.size())});
    out_.append(s);
    return *this;
  }
  std::string str() const { return out_; }

 private:
  std::string out_;
};

std::string Hash(char fill) { return std::string(32, fill); }

// ObjectKey(chunk_hash, model_name, kv_rank, object_group_id, cache_salt) as
// msgspec encodes the frozen dataclass: a fixmap of its five fields in order.
Bytes& AppendKey(Bytes& b, char fill, std::string_view model, std::initializer_list<int> kv_rank,
                 int group, std::string_view salt) {
  b.Raw({0x85}).FixStr("chunk_hash").Bin8(Hash(fill));
  b.FixStr("model_name").FixStr(model);
  b.FixStr("kv_rank").Raw(kv_rank);
  b.FixStr("object_group_id").Raw({group});
  return b.FixStr("cache_salt").FixStr(salt);
}

// kv_rank of world size 1, rank 0: (1 << 24) | (1 << 8) = 16777472, a uint32.
constexpr std::initializer_list<int> kRank0 = {0xce, 0x01, 0x00, 0x01, 0x00};

TEST(P2pCodecTest, DecodesTheKeysAReferencePeerSends) {
  Bytes b;
  b.Raw({0x93});  // three keys, the first twice (duplicates are legal)
  AppendKey(b, 'a', "llama", kRank0, 0, "");
  AppendKey(b, 'b', "llama", kRank0, 1, "t1");
  AppendKey(b, 'a', "llama", kRank0, 0, "");
  Result<std::vector<P2pObjectKey>> keys = DecodeP2pKeys(b.str());
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_EQ(keys->size(), 3u);
  EXPECT_EQ((*keys)[0].chunk_hash, Hash('a'));
  EXPECT_EQ((*keys)[0].model_name, "llama");
  EXPECT_EQ((*keys)[0].kv_rank, 16777472);
  EXPECT_EQ((*keys)[1].object_group_id, 1);
  EXPECT_EQ((*keys)[1].cache_salt, "t1");
  EXPECT_EQ((*keys)[2], (*keys)[0]);
}

TEST(P2pCodecTest, DefaultedFieldsMayBeMissingAndUnknownFieldsAreIgnored) {
  Bytes b;
  b.Raw({0x91, 0x84}).FixStr("chunk_hash").Bin8(Hash('c'));
  b.FixStr("model_name").FixStr("m").FixStr("kv_rank").Raw({0x05});
  b.FixStr("future_field").Raw({0xc3});
  Result<std::vector<P2pObjectKey>> keys = DecodeP2pKeys(b.str());
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ((*keys)[0].object_group_id, 0);
  EXPECT_EQ((*keys)[0].cache_salt, "");
  EXPECT_EQ((*keys)[0].kv_rank, 5);
}

TEST(P2pCodecTest, RefusesAKeyOfTheWrongShape) {
  Bytes short_hash;
  short_hash.Raw({0x91, 0x83}).FixStr("chunk_hash").Bin8(std::string(31, 'x'));
  short_hash.FixStr("model_name").FixStr("m").FixStr("kv_rank").Raw({0x00});
  EXPECT_EQ(DecodeP2pKeys(short_hash.str()).status().code(), ErrorCode::kMalformedRequest);

  Bytes no_rank;
  no_rank.Raw({0x91, 0x82}).FixStr("chunk_hash").Bin8(Hash('a')).FixStr("model_name").FixStr("m");
  const Status missing = DecodeP2pKeys(no_rank.str()).status();
  EXPECT_EQ(missing.code(), ErrorCode::kMalformedRequest);
  EXPECT_NE(missing.message().find("kv_rank"), std::string::npos) << missing.message();

  Bytes negative_group;
  negative_group.Raw({0x91, 0x84}).FixStr("chunk_hash").Bin8(Hash('a'));
  negative_group.FixStr("model_name").FixStr("m").FixStr("kv_rank").Raw({0x00});
  negative_group.FixStr("object_group_id").Raw({0xff});  // -1
  EXPECT_EQ(DecodeP2pKeys(negative_group.str()).status().code(), ErrorCode::kMalformedRequest);

  EXPECT_FALSE(DecodeP2pKeys(Bytes().Raw({0x91, 0xc0}).str()).ok());  // a key that is nil
  EXPECT_FALSE(DecodeP2pKeys(Bytes().Raw({0x90, 0x90}).str()).ok());  // trailing bytes
}

TEST(P2pCodecTest, AKeyCountBeyondTheLimitIsRefusedBeforeAnythingIsKept) {
  // An array header claiming 2^32 - 1 keys in a 5-byte frame.
  const std::string frame = Bytes().Raw({0xdd, 0xff, 0xff, 0xff, 0xff}).str();
  EXPECT_FALSE(DecodeP2pKeys(frame).ok());
  P2pLimits limits;
  limits.max_keys = 2;
  Bytes three;
  three.Raw({0x93});
  for (int i = 0; i < 3; ++i) AppendKey(three, 'a', "m", kRank0, 0, "");
  EXPECT_EQ(DecodeP2pKeys(three.str(), limits).status().code(), ErrorCode::kTooLarge);
}

// {"shapes": [[2, 32, 256, 1024]], "dtypes": ["bfloat16"]}: the spec's
// Llama-3.1-8B bf16 object at chunk 256 (one object = 32 MiB).
Bytes& AppendLlamaLayout(Bytes& b) {
  b.Raw({0x82}).FixStr("shapes").Raw({0x91, 0x94, 0x02, 0x20, 0xcd, 0x01, 0x00, 0xcd, 0x04, 0x00});
  return b.FixStr("dtypes").Raw({0x91}).FixStr("bfloat16");
}

const P2pLayout kLlama{{{2, 32, 256, 1024}}, {"bfloat16"}};

TEST(P2pCodecTest, DecodesTheGroupLayoutMapWithIntKeys) {
  Bytes b;
  b.Raw({0x82, 0x00});
  AppendLlamaLayout(b).Raw({0x01});
  AppendLlamaLayout(b);
  Result<P2pLayouts> layouts = DecodeP2pLayouts(b.str());
  ASSERT_TRUE(layouts.ok()) << layouts.status().ToString();
  EXPECT_FALSE(layouts->single);
  ASSERT_EQ(layouts->by_group.size(), 2u);
  EXPECT_EQ(layouts->by_group.at(0), kLlama);
  EXPECT_EQ(layouts->by_group.at(1), kLlama);
}

TEST(P2pCodecTest, DecodesAnOlderPeersSingleLayoutDesc) {
  Bytes b;
  AppendLlamaLayout(b);
  Result<P2pLayouts> layouts = DecodeP2pLayouts(b.str());
  ASSERT_TRUE(layouts.ok()) << layouts.status().ToString();
  EXPECT_TRUE(layouts->single);
  EXPECT_EQ(layouts->by_group.at(0), kLlama);
  Result<P2pLayouts> none = DecodeP2pLayouts(Bytes().Raw({0x80}).str());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->by_group.empty());
}

TEST(P2pCodecTest, RefusesALayoutOfTheWrongShape) {
  Bytes mismatched;
  mismatched.Raw({0x81, 0x00, 0x82}).FixStr("shapes").Raw({0x92, 0x91, 0x01, 0x91, 0x02});
  mismatched.FixStr("dtypes").Raw({0x91}).FixStr("uint8");
  EXPECT_EQ(DecodeP2pLayouts(mismatched.str()).status().code(), ErrorCode::kMalformedRequest);

  Bytes twice;
  twice.Raw({0x82, 0x00});
  AppendLlamaLayout(twice).Raw({0x00});
  AppendLlamaLayout(twice);
  EXPECT_EQ(DecodeP2pLayouts(twice.str()).status().code(), ErrorCode::kMalformedRequest);

  Bytes negative_dim;
  negative_dim.Raw({0x81, 0x00, 0x82}).FixStr("shapes").Raw({0x91, 0x91, 0xff});
  negative_dim.FixStr("dtypes").Raw({0x91}).FixStr("uint8");
  EXPECT_EQ(DecodeP2pLayouts(negative_dim.str()).status().code(), ErrorCode::kMalformedRequest);

  P2pLimits limits;
  limits.max_dims = 3;
  Bytes deep;
  deep.Raw({0x81, 0x00});
  AppendLlamaLayout(deep);  // four dimensions
  EXPECT_EQ(DecodeP2pLayouts(deep.str(), limits).status().code(), ErrorCode::kTooLarge);
}

TEST(P2pCodecTest, ALayoutsBytesAreItsTensorsElementsTimesTheirDtypeSize) {
  EXPECT_EQ(*P2pLayoutBytes(kLlama), 32u << 20);  // the spec's "one object = 32 MiB"
  const P2pLayout two{{{2, 3}, {5}}, {"float32", "float8_e4m3fn"}};
  EXPECT_EQ(*P2pLayoutBytes(two), 2u * 3 * 4 + 5);
  EXPECT_EQ(P2pLayoutBytes({{{4}}, {"complex_thing"}}).status().code(),
            ErrorCode::kInvalidArgument);
  const std::int64_t huge = std::int64_t{1} << 40;
  EXPECT_EQ(P2pLayoutBytes({{{huge, huge}}, {"uint8"}}).status().code(),
            ErrorCode::kInvalidArgument);
}

TEST(P2pCodecTest, AddressesCarryTheNewestFieldsAndDecodeInBothForms) {
  const std::vector<P2pAddress> addresses = {{4096, 32 << 20}, {-1, 0}};
  const std::string encoded = EncodeP2pAddresses(addresses);
  Bytes expected;
  expected.Raw({0x92, 0x84}).FixStr("offset").Raw({0xcd, 0x10, 0x00});
  expected.FixStr("size").Raw({0xce, 0x02, 0x00, 0x00, 0x00});
  expected.FixStr("cxl_arena").Raw({0xc0}).FixStr("cxl_ttl_seconds").Raw({0x00});
  expected.Raw({0x84}).FixStr("offset").Raw({0xff}).FixStr("size").Raw({0x00});
  expected.FixStr("cxl_arena").Raw({0xc0}).FixStr("cxl_ttl_seconds").Raw({0x00});
  EXPECT_EQ(encoded, expected.str());
  Result<std::optional<std::vector<P2pAddress>>> decoded = DecodeP2pAddresses(encoded);
  ASSERT_TRUE(decoded.ok() && decoded->has_value());
  EXPECT_EQ(**decoded, addresses);
  EXPECT_TRUE((**decoded)[0].valid());
  EXPECT_FALSE((**decoded)[1].valid());

  Bytes older;  // an older owner: offset and size only
  older.Raw({0x91, 0x82}).FixStr("offset").Raw({0x00}).FixStr("size").Raw({0x10});
  Result<std::optional<std::vector<P2pAddress>>> old = DecodeP2pAddresses(older.str());
  ASSERT_TRUE(old.ok() && old->has_value());
  EXPECT_EQ((**old)[0], (P2pAddress{0, 16}));

  Result<std::optional<std::vector<P2pAddress>>> nil = DecodeP2pAddresses(Bytes().Raw({0xc0}).str());
  ASSERT_TRUE(nil.ok());
  EXPECT_FALSE(nil->has_value());
}

TEST(P2pCodecTest, OurEncodingIsTheReferenceShapeAndDecodesBack) {
  const std::vector<P2pObjectKey> keys = {{Hash('a'), "llama", 16777472, 0, "", 0, ""},
                                          {Hash('b'), "llama", 16777472, 1, "t1", 0, ""}};
  Bytes expected;
  expected.Raw({0x92});
  AppendKey(expected, 'a', "llama", kRank0, 0, "");
  AppendKey(expected, 'b', "llama", kRank0, 1, "t1");
  EXPECT_EQ(EncodeP2pKeys(keys), expected.str());
  EXPECT_EQ(*DecodeP2pKeys(EncodeP2pKeys(keys)), keys);

  P2pLayouts groups;
  groups.by_group = {{0, kLlama}, {3, P2pLayout{{{1, 2}, {3}}, {"uint8", "float16"}}}};
  EXPECT_EQ(*DecodeP2pLayouts(EncodeP2pLayouts(groups)), groups);
  P2pLayouts single;
  single.single = true;
  single.by_group = {{0, kLlama}};
  Bytes single_bytes;
  AppendLlamaLayout(single_bytes);
  EXPECT_EQ(EncodeP2pLayouts(single), single_bytes.str());
}

// Our own fields ride past the reference's: written only when set (so a
// reference-shaped key stays byte-identical, above), read back exactly, and
// bounded and checked like the rest.
TEST(P2pCodecTest, OurLayoutNamespaceAndTagsTravelOnlyWhenSet) {
  P2pObjectKey ours{Hash('c'), "llama", 16777472, 0, "", 0, ""};
  ours.layout_namespace = 0xdeadbeef;
  ours.tags = "lang%en%user%7";
  const std::vector<P2pObjectKey> keys = {ours, {Hash('d'), "llama", 16777472, 0, "", 0, ""}};
  const std::string wire = EncodeP2pKeys(keys);
  EXPECT_NE(wire.find("lmc_layout_namespace"), std::string::npos);
  EXPECT_EQ(*DecodeP2pKeys(wire), keys);
  EXPECT_EQ(EncodeP2pKeys(std::span(keys).last(1)).find("lmc_"), std::string::npos);

  auto one_key_with = [](std::string_view field, auto value) {
    msgpk::Encoder e;
    e.Array(1).Map(4);
    e.Str("chunk_hash").Bin(Hash('e'));
    e.Str("model_name").Str("m");
    e.Str("kv_rank").Int(0);
    e.Str(field);
    if constexpr (std::is_same_v<decltype(value), int>) {
      e.Int(value);
    } else {
      e.Str(value);
    }
    return e.Take();
  };
  EXPECT_FALSE(DecodeP2pKeys(one_key_with("lmc_layout_namespace", -1)).ok());
  EXPECT_EQ(DecodeP2pKeys(one_key_with("lmc_tags", std::string(8193, 'x'))).status().code(),
            ErrorCode::kTooLarge);
}

}  // namespace
}  // namespace lmcache::protocol
