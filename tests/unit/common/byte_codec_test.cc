// ByteWriter/ByteReader: integers are little-endian whatever their width and
// sign, what the writer wrote reads back, and every malformed input (short,
// trailed, an oversized string, a count the bytes cannot back, a bool that is
// not 0 or 1) is refused with an error naming the message and the field.
#include "common/byte_codec.h"

#include <gtest/gtest.h>

namespace lmcache {
namespace {

TEST(ByteCodecTest, WritesLittleEndianAndReadsItBack) {
  ByteWriter w;
  w.Put(std::uint16_t{0x0102});
  w.Put(std::int32_t{-2});
  w.Put(std::uint64_t{0x1122334455667788});
  w.PutString("ab");
  w.PutInts({-1, 7});
  w.PutRaw("zz");
  const std::string bytes = w.Take();
  EXPECT_EQ(bytes.substr(0, 2), std::string("\x02\x01", 2));
  EXPECT_EQ(bytes.substr(2, 4), std::string("\xfe\xff\xff\xff", 4));
  EXPECT_EQ(bytes.substr(6, 8), std::string("\x88\x77\x66\x55\x44\x33\x22\x11", 8));
  EXPECT_EQ(bytes.substr(14, 6), std::string("\x02\0\0\0ab", 6));

  ByteReader r(bytes, "sample");
  std::uint16_t a = 0;
  std::int32_t b = 0;
  std::uint64_t c = 0;
  std::string s;
  std::vector<std::int64_t> ints;
  std::string_view raw;
  ASSERT_TRUE(r.Get(&a, "a").ok());
  ASSERT_TRUE(r.Get(&b, "b").ok());
  ASSERT_TRUE(r.Get(&c, "c").ok());
  ASSERT_TRUE(r.GetString(&s, "s").ok());
  ASSERT_TRUE(r.GetInts(&ints, "ints").ok());
  ASSERT_TRUE(r.GetRaw(2, &raw, "raw").ok());
  EXPECT_TRUE(r.Finish().ok());
  EXPECT_EQ(a, 0x0102);
  EXPECT_EQ(b, -2);
  EXPECT_EQ(c, 0x1122334455667788u);
  EXPECT_EQ(s, "ab");
  EXPECT_EQ(ints, (std::vector<std::int64_t>{-1, 7}));
  EXPECT_EQ(raw, "zz");
}

TEST(ByteCodecTest, RefusesShortTrailedOversizedAndUnbackedInput) {
  ByteWriter w;
  w.PutString("hello");
  const std::string bytes = w.Take();
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    ByteReader r(std::string_view(bytes).substr(0, cut), "greeting");
    std::string s;
    const Status st = r.GetString(&s, "word");
    EXPECT_EQ(st.code(), ErrorCode::kMalformedRequest) << cut;
    EXPECT_NE(st.message().find("greeting: word"), std::string::npos) << st.message();
  }
  {
    const std::string trailed = bytes + "x";
    ByteReader r(trailed, "greeting");
    std::string s;
    ASSERT_TRUE(r.GetString(&s, "word").ok());
    EXPECT_FALSE(r.Finish().ok());
  }
  {
    ByteReader r(bytes, "greeting");
    std::string s;
    EXPECT_FALSE(r.GetString(&s, "word", 4).ok());  // 5 bytes, over the bound
  }
  {
    ByteWriter huge;
    huge.Put(std::uint64_t{1} << 60);  // a count of 2^60 ints with 8 bytes behind it
    huge.Put(std::int64_t{0});
    const std::string h = huge.Take();
    ByteReader r(h, "list");
    std::vector<std::int64_t> ints;
    EXPECT_FALSE(r.GetInts(&ints, "ints").ok());
    EXPECT_TRUE(ints.empty());
  }
  {
    const std::string two("\x02", 1);
    ByteReader r(two, "flag");
    bool flag = false;
    EXPECT_FALSE(r.GetBool(&flag, "on").ok());
  }
}

}  // namespace
}  // namespace lmcache
