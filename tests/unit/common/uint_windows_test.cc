// uint_windows: msgpack token arrays 64 bytes at a time, against the plain
// item-by-item reading of the same bytes: exact values, item boundaries,
// never a read past the frame or a write past max_items, and a stop before
// any item of another form. Skipped on CPUs without AVX-512 VBMI (VBMI2).
#include "common/uint_windows.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"

namespace lmcache::msgpk {
namespace {

// Items of the four forms, in the shortest form or not, with the bytes
// encoding them and each item's length.
struct Items {
  std::vector<std::uint32_t> values;
  std::vector<std::size_t> lengths;
  std::string bytes;
};

void Append(Items& items, std::uint32_t value, int form) {
  items.values.push_back(value);
  switch (form) {
    case 0:  // positive fixint
      items.bytes.push_back(static_cast<char>(value & 0x7f));
      items.values.back() = value & 0x7f;
      items.lengths.push_back(1);
      return;
    case 1:  // uint8
      items.bytes += {'\xcc', static_cast<char>(value & 0xff)};
      items.values.back() = value & 0xff;
      items.lengths.push_back(2);
      return;
    case 2:  // uint16
      items.bytes +=
          {'\xcd', static_cast<char>(value >> 8 & 0xff), static_cast<char>(value & 0xff)};
      items.values.back() = value & 0xffff;
      items.lengths.push_back(3);
      return;
    default:  // uint32
      items.bytes += {'\xce', static_cast<char>(value >> 24), static_cast<char>(value >> 16 & 0xff),
                      static_cast<char>(value >> 8 & 0xff), static_cast<char>(value & 0xff)};
      items.lengths.push_back(5);
      return;
  }
}

// `count` items whose forms are drawn from `forms` (weights of the four).
Items RandomItems(std::mt19937& rng, std::size_t count, std::discrete_distribution<int> forms) {
  Items items;
  for (std::size_t i = 0; i < count; ++i)
    Append(items, static_cast<std::uint32_t>(rng()), forms(rng));
  return items;
}

// The bytes `items` items take from the first.
std::size_t BytesOf(const Items& items, std::size_t count) {
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < count; ++i) bytes += items.lengths[i];
  return bytes;
}

// `bytes` at the very end of a readable page, followed by one that is not:
// a read past the end faults.
class GuardedBytes {
 public:
  explicit GuardedBytes(const std::string& bytes) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    readable_ = (bytes.size() + page - 1) / page * page + page;
    mapping_ =
        mmap(nullptr, readable_ + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(mapping_, MAP_FAILED);
    EXPECT_EQ(mprotect(static_cast<char*>(mapping_) + readable_, page, PROT_NONE), 0);
    data_ = static_cast<std::uint8_t*>(mapping_) + readable_ - bytes.size();
    std::memcpy(data_, bytes.data(), bytes.size());
    size_ = readable_ + page;
  }
  ~GuardedBytes() { munmap(mapping_, size_); }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  const std::uint8_t* data() const { return data_; }

 private:
  void* mapping_ = nullptr;
  std::size_t readable_ = 0;
  std::size_t size_ = 0;
  std::uint8_t* data_ = nullptr;
};

// What one call must do: decode a prefix of the items, exactly, up to an
// item boundary, no more than max_items, and write nothing past what it
// decoded.
void ExpectDecodesAPrefix(const Items& items, std::size_t max_items, const std::string& why) {
  const GuardedBytes guarded(items.bytes);
  std::vector<std::uint32_t> out(max_items + 16, 0xdeadbeef);
  const UintWindowsResult done =
      DecodeUintWindows(guarded.data(), items.bytes.size(), out.data(), max_items);
  ASSERT_LE(done.items, std::min(max_items, items.values.size())) << why;
  ASSERT_EQ(done.bytes, BytesOf(items, done.items)) << why;
  for (std::size_t i = 0; i < done.items; ++i)
    ASSERT_EQ(out[i], items.values[i]) << why << " item " << i;
  for (std::size_t i = done.items; i < out.size(); ++i)
    ASSERT_EQ(out[i], 0xdeadbeef) << why << " wrote " << i;
  // Uncapped, it goes on until fewer than 64 bytes are left or its 16
  // windows (896 bytes) are done.
  if (max_items >= items.values.size()) {
    ASSERT_TRUE(items.bytes.size() - done.bytes < kUintWindowBytes || done.bytes >= 16 * 56) << why;
  }
}

class UintWindows : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UintWindowsAvailable()) GTEST_SKIP() << "this CPU has no AVX-512 VBMI";
  }
};

TEST_F(UintWindows, DecodeEveryMixOfTheFourFormsExactly) {
  std::mt19937 rng(7);
  const std::vector<std::vector<double>> mixes = {{1, 1, 1, 1}, {0, 0, 1, 1}, {1, 0, 7, 0},
                                                  {1, 0, 0, 0}, {0, 0, 0, 1}, {1, 1, 0, 0},
                                                  {0, 1, 0, 0}};
  for (std::size_t m = 0; m < mixes.size(); ++m) {
    for (int round = 0; round < 50; ++round) {
      const std::size_t count = 1 + rng() % 700;
      const Items items = RandomItems(rng, count, {mixes[m].begin(), mixes[m].end()});
      const std::string why = "mix " + std::to_string(m) + " round " + std::to_string(round);
      ExpectDecodesAPrefix(items, count, why);
      // A whole block when it has the bytes: 16 windows own 896 bytes.
      if (items.bytes.size() >= 896 + 8) {
        const GuardedBytes guarded(items.bytes);
        std::vector<std::uint32_t> out(count + 16);
        const auto done = DecodeUintWindows(guarded.data(), items.bytes.size(), out.data(), count);
        EXPECT_GE(done.bytes, 896u) << why;
      }
      ExpectDecodesAPrefix(items, rng() % (count + 1), why + " capped");
    }
  }
}

TEST_F(UintWindows, DecodeEverythingButTheLast64BytesAcrossCalls) {
  std::mt19937 rng(11);
  const Items items = RandomItems(rng, 20000, {1, 1, 4, 4});
  const GuardedBytes guarded(items.bytes);
  std::vector<std::uint32_t> out(items.values.size());
  UintWindowsResult total;
  while (true) {
    const auto done =
        DecodeUintWindows(guarded.data() + total.bytes, items.bytes.size() - total.bytes,
                          out.data() + total.items, items.values.size() - total.items);
    if (done.items == 0) break;
    total.bytes += done.bytes;
    total.items += done.items;
  }
  EXPECT_LT(items.bytes.size() - total.bytes, kUintWindowBytes);
  EXPECT_EQ(total.bytes, BytesOf(items, total.items));
  for (std::size_t i = 0; i < total.items; ++i) ASSERT_EQ(out[i], items.values[i]) << i;
}

TEST_F(UintWindows, StopBeforeAnItemOfAnotherFormWhereverItIs) {
  // A uint64, a nil, an int8, a str, a map: the scalar decoder takes or
  // reports each; the windows must never decode it, or anything after it.
  const std::vector<std::string> others = {std::string("\xcf\0\0\0\0\0\0\0\x07", 9), "\xc0",
                                           "\xd0\xff", "\xa1x", "\x80"};
  std::mt19937 rng(13);
  for (const std::string& other : others) {
    for (std::size_t at = 0; at < 300; at += 1 + rng() % 7) {
      Items items = RandomItems(rng, at, {1, 1, 3, 3});
      const std::size_t before = items.values.size();
      items.bytes += other;
      const Items after = RandomItems(rng, 400, {1, 1, 3, 3});
      items.bytes += after.bytes;
      // Only the items before `other` are comparable; a decode past it fails here.
      items.values.resize(before);
      items.lengths.resize(before);
      const GuardedBytes guarded(items.bytes);
      std::vector<std::uint32_t> out(before + 400 + 16);
      const auto done =
          DecodeUintWindows(guarded.data(), items.bytes.size(), out.data(), before + 400);
      ASSERT_LE(done.items, before)
          << "other " << static_cast<int>(other[0] & 0xff) << " at " << at;
      ASSERT_EQ(done.bytes, BytesOf(items, done.items));
      for (std::size_t i = 0; i < done.items; ++i) ASSERT_EQ(out[i], items.values[i]);
      // From an item boundary a window always decodes what precedes the
      // other item's window.
      if (BytesOf(items, before) >= 8 * 56 + 64) {
        EXPECT_GT(done.items, 0u);
      }
    }
  }
}

TEST_F(UintWindows, TakeNothingWithFewerThan64Bytes) {
  std::mt19937 rng(17);
  const Items items = RandomItems(rng, 12, {0, 0, 0, 1});  // 60 bytes
  ASSERT_LT(items.bytes.size(), kUintWindowBytes);
  const GuardedBytes guarded(items.bytes);
  std::vector<std::uint32_t> out(12);
  const auto done = DecodeUintWindows(guarded.data(), items.bytes.size(), out.data(), 12);
  EXPECT_EQ(done.items, 0u);
  EXPECT_EQ(done.bytes, 0u);
}

// The encoder's windows write exactly the shortest forms, 12 values at a
// time, and the Encoder with them exactly what one item at a time writes.
TEST(UintWindowsEncode, WriteEachValueInItsShortestForm) {
  if (!UintWindowsEncodeAvailable()) GTEST_SKIP() << "this CPU has no AVX-512 VBMI2";
  std::mt19937 rng(23);
  const std::vector<std::uint32_t> edges = {0, 1, 127, 128, 255, 256, 65535, 65536, 0xffffffff};
  for (int round = 0; round < 200; ++round) {
    const std::size_t count = rng() % 400;
    std::vector<std::uint32_t> values(count);
    for (auto& v : values) {
      v = rng() % 4 == 0 ? edges[rng() % edges.size()]
                         : static_cast<std::uint32_t>(rng()) >> (rng() % 32);
    }
    std::string expected;
    for (std::size_t i = 0; i < count / kUintEncodeGroup * kUintEncodeGroup; ++i) {
      expected += Encoder().Uint(values[i]).Take();
    }
    std::string out(count * 5 + kUintWindowBytes, '\0');
    const std::size_t written = EncodeUintWindows(values.data(), count, out.data());
    ASSERT_EQ(out.substr(0, written), expected) << "round " << round;

    Encoder one_by_one;
    one_by_one.Array(static_cast<std::uint32_t>(count));
    for (const std::uint32_t v : values) one_by_one.Uint(v);
    ASSERT_EQ(Encoder().UintArray(values).Take(), one_by_one.Take()) << "round " << round;
  }
}

// The cursor with the windows against an item-by-item decode of the same
// frame's unsigned items (what a token array may hold): the same values, or
// an error from both, for every mix and every place a frame can be cut or
// spoiled.
std::optional<std::vector<std::uint32_t>> UnsignedItems(const std::string& frame) {
  MsgpackCursor cursor(frame);
  const auto count = cursor.ReadArrayHeader("tokens");
  if (!count.ok()) return std::nullopt;
  std::vector<std::uint32_t> values;
  for (std::uint32_t i = 0; i < *count; ++i) {
    if (cursor.AtEnd()) return std::nullopt;
    const auto type = static_cast<std::uint8_t>(frame[cursor.position()]);
    if (type > 0x7f && (type < 0xcc || type > 0xcf)) return std::nullopt;  // not unsigned
    const auto v = cursor.ReadInt("tokens");
    if (!v.ok() || *v > UINT32_MAX) return std::nullopt;
    values.push_back(static_cast<std::uint32_t>(*v));
  }
  return values;
}

// Valid uint64 items (below 2^32) among the others: the windows stop before
// each, the item-by-item decoder takes it, and the windows go on after it.
TEST(UintWindowsInTheCursor, TakeUint64ItemsAmongTheOthers) {
  std::mt19937 rng(29);
  Items items = RandomItems(rng, 3000, {1, 1, 3, 3});
  std::string bytes;
  std::vector<std::uint32_t> values;
  std::size_t at = 0;
  for (std::size_t i = 0; i < items.values.size(); ++i) {
    if (i % 97 == 0) {  // a uint64 of a small value
      bytes += std::string("\xcf\0\0\0\0", 5);
      const std::uint32_t v = items.values[i];
      bytes += {static_cast<char>(v >> 24), static_cast<char>(v >> 16 & 0xff),
                static_cast<char>(v >> 8 & 0xff), static_cast<char>(v & 0xff)};
    } else {
      bytes += items.bytes.substr(at, items.lengths[i]);
    }
    values.push_back(items.values[i]);
    at += items.lengths[i];
  }
  const std::string frame =
      Encoder().Array(static_cast<std::uint32_t>(values.size())).Take() + bytes;
  const auto decoded = MsgpackCursor(frame).ReadUint32Array("tokens");
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, values);
}

TEST(UintWindowsInTheCursor, AgreeWithAnItemByItemDecode) {
  std::mt19937 rng(19);
  for (int round = 0; round < 300; ++round) {
    const std::size_t count = rng() % 2000;
    Items items = RandomItems(rng, count, {1, 1, 3, 3});
    std::string frame = Encoder().Array(static_cast<std::uint32_t>(count)).Take() + items.bytes;
    if (round % 3 == 1 && !frame.empty()) frame.resize(rng() % frame.size());  // cut
    if (round % 3 == 2 && frame.size() > 6) {  // spoiled: a signed int, a nil, a bad byte
      const char spoilers[] = {'\xd0', '\xc0', '\xc1', '\xff'};
      frame[5 + rng() % (frame.size() - 6)] = spoilers[rng() % 4];
    }
    // What follows an array in a key: the map's next name and value.
    if (round % 5 == 4) {
      frame += Encoder().Str("start").Int(0).Str("request_id").Str(std::string(90, 'r')).Take();
    }
    const auto expected = UnsignedItems(frame);
    MsgpackCursor cursor(frame);
    const auto actual = cursor.ReadUint32Array("tokens");
    if (round % 5 == 4 && round % 3 == 0) {  // whole: the next value follows the array
      ASSERT_TRUE(actual.ok()) << "round " << round;
      const auto next = cursor.ReadStr("next");
      ASSERT_TRUE(next.ok()) << "round " << round << ": " << next.status().ToString();
      EXPECT_EQ(*next, "start") << "round " << round;
    }
    ASSERT_EQ(actual.ok(), expected.has_value())
        << "round " << round << ": " << actual.status().ToString();
    if (expected) ASSERT_EQ(*actual, *expected) << "round " << round;
  }
}

}  // namespace
}  // namespace lmcache::msgpk
