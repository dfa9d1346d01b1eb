#include "common/msgpack_cursor.h"

#include <gtest/gtest.h>

#include <random>

namespace lmcache::mp {
namespace {

TEST(MsgpackCursor, ReadsEveryUnsignedFormOfATokenArray) {
  const std::vector<std::uint64_t> values = {0, 127, 128, 255, 256, 65535, 65536, 4294967295u};
  Encoder e;
  e.Array(static_cast<std::uint32_t>(values.size()));
  for (auto v : values) e.Uint(v);
  MsgpackCursor cursor(e.bytes());
  auto tokens = cursor.ReadUint32Array("tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  ASSERT_EQ(tokens->size(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ((*tokens)[i], values[i]);
  EXPECT_TRUE(cursor.AtEnd());
}

TEST(MsgpackCursor, AcceptsAUint64FormOfASmallValueAndRejectsLargeOnes) {
  std::string small = "\x91\xcf";  // [uint64 7]
  small.append(7, '\0');
  small.push_back('\x07');
  auto ok = MsgpackCursor(small).ReadUint32Array("tokens");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)[0], 7u);
  const std::string big = Encoder().Array(1).Uint(1ull << 32).Take();
  EXPECT_EQ(MsgpackCursor(big).ReadUint32Array("tokens").status().code(),
            ErrorCode::kMalformedRequest);
  const std::string negative = Encoder().Array(1).Int(-1).Take();
  auto bad = MsgpackCursor(negative).ReadUint32Array("tokens");
  EXPECT_EQ(bad.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_NE(bad.status().message().find("item 0"), std::string::npos);
}

TEST(MsgpackCursor, TruncatedInputIsAnErrorAtEveryCut) {
  Encoder e;
  e.Map(2).Str("tokens").Array(3).Uint(1).Uint(70000).Uint(300).Str("name").Str("abc");
  const std::string full = e.Take();
  for (std::size_t cut = 0; cut < full.size(); ++cut) {
    MsgpackCursor cursor(std::string_view(full).substr(0, cut));
    Status status = cursor.Skip();
    EXPECT_FALSE(status.ok()) << "cut at " << cut;
  }
  MsgpackCursor whole(full);
  EXPECT_TRUE(whole.Skip().ok());
  EXPECT_TRUE(whole.AtEnd());
}

TEST(MsgpackCursor, LyingHeadersAreRejectedBeforeAllocating) {
  const std::string huge_array = "\xdd\xff\xff\xff\xff";  // claims 2^32-1 items
  EXPECT_FALSE(MsgpackCursor(huge_array).ReadUint32Array("tokens").ok());
  const std::string huge_map = "\xdf\x00\x10\x00\x00";
  EXPECT_FALSE(MsgpackCursor(huge_map).ReadMapHeader("key").ok());
  const std::string long_str = "\xdb\x7f\xff\xff\xff";
  EXPECT_FALSE(MsgpackCursor(long_str).ReadStr("name").ok());
}

TEST(MsgpackCursor, SkipHonoursTheDepthLimit) {
  std::string nested(20, '\x91');  // [[[[...]]]]
  nested.push_back('\x01');
  DecodeLimits limits;
  limits.max_depth = 8;
  EXPECT_EQ(MsgpackCursor(nested, limits).Skip().code(), ErrorCode::kTooLarge);
  limits.max_depth = 32;
  EXPECT_TRUE(MsgpackCursor(nested, limits).Skip().ok());
}

TEST(MsgpackCursor, SkipsEveryTypeItMayMeet) {
  Encoder e;
  e.Array(8)
      .Nil()
      .Bool(true)
      .Int(-5)
      .Uint(1ull << 40)
      .Float(1.5)
      .Str("x")
      .Bin("yz")
      .Map(1)
      .Str("k")
      .Array(0);
  std::string frame = e.Take();
  frame += std::string("\xd6\x01\x00\x00\x00\x00", 6);  // fixext 4 after the array
  MsgpackCursor cursor(frame);
  EXPECT_TRUE(cursor.Skip().ok());
  EXPECT_TRUE(cursor.Skip().ok());
  EXPECT_TRUE(cursor.AtEnd());
  EXPECT_EQ(MsgpackCursor("\xc1").Skip().code(), ErrorCode::kMalformedRequest);
}

TEST(MsgpackCursor, ScalarsCheckTheirTypes) {
  const std::string frame = Encoder().Str("abc").Take() + Encoder().Int(-70000).Take() +
                            Encoder().Bool(false).Take() + Encoder().Nil().Take();
  MsgpackCursor cursor(frame);
  EXPECT_EQ(*cursor.ReadStr("s"), "abc");
  EXPECT_EQ(*cursor.ReadInt("i"), -70000);
  EXPECT_FALSE(*cursor.ReadBool("b"));
  EXPECT_TRUE(cursor.NextIsNil());
  EXPECT_TRUE(cursor.ReadNil("n").ok());
  EXPECT_TRUE(cursor.AtEnd());
  EXPECT_EQ(MsgpackCursor(Encoder().Str("x").Take()).ReadInt("i").status().code(),
            ErrorCode::kMalformedRequest);
  EXPECT_FALSE(MsgpackCursor(Encoder().Int(7).Take()).ReadStr("s").ok());
}

TEST(MsgpackCursor, RandomBytesNeverCrash) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20000; ++trial) {
    std::string junk(rng() % 32, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    MsgpackCursor cursor(junk);
    (void)cursor.Skip();
    MsgpackCursor tokens(junk);
    (void)tokens.ReadUint32Array("tokens");  // under ASan, any stray read fails the test
  }
}

}  // namespace
}  // namespace lmcache::mp
