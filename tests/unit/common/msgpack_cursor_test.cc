#include "common/msgpack_cursor.h"

#include <gtest/gtest.h>

#include <random>

namespace lmcache::msgpk {
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

// Token arrays are decoded a run of 8 same-width items at a time where they
// can be (issue 18): runs of every width, runs broken by one odd item at every
// position, and runs that end where the array does, all decode exactly.
TEST(MsgpackCursor, TokenRunsOfEveryWidthDecodeExactly) {
  const std::vector<std::uint32_t> widths = {5, 200, 40000, 70000, 1u << 31};
  for (const std::uint32_t base : widths) {
    for (const std::uint32_t odd : widths) {
      for (std::size_t at = 0; at < 40; at += 3) {
        std::vector<std::uint32_t> ids(37 + at % 8);
        for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = base + static_cast<std::uint32_t>(i % 3);
        if (at < ids.size()) ids[at] = odd;
        Encoder e;
        e.Array(static_cast<std::uint32_t>(ids.size()));
        for (const std::uint32_t id : ids) e.Uint(id);
        auto decoded = MsgpackCursor(e.bytes()).ReadUint32Array("tokens");
        ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
        ASSERT_EQ(*decoded, ids) << "base " << base << " odd " << odd << " at " << at;
      }
    }
  }
}

// A run's items are checked like single ones: a cut inside a run is
// truncation, a foreign type in the middle of a run is named by its index.
TEST(MsgpackCursor, TokenRunsAreCheckedLikeSingleItems) {
  Encoder e;
  e.Array(16);
  for (int i = 0; i < 16; ++i) e.Uint(70000 + i);  // uint32: 5 bytes each
  const std::string full = e.Take();
  for (std::size_t cut = 1; cut < full.size(); ++cut) {
    EXPECT_EQ(MsgpackCursor(std::string_view(full).substr(0, cut)).ReadUint32Array("t").status().code(),
              ErrorCode::kMalformedRequest)
        << "cut at " << cut;
  }
  std::string foreign = full;
  foreign[3 + 5 * 5] = '\xd2';  // item 5 becomes an int32
  auto bad = MsgpackCursor(foreign).ReadUint32Array("t");
  EXPECT_EQ(bad.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_NE(bad.status().message().find("item 5"), std::string::npos) << bad.status().ToString();
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
}  // namespace lmcache::msgpk
