#include "common/blake3.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "fakes/b3sum_oracle.h"

namespace lmcache {
namespace {

using testing::B3sumHex;
using testing::FindB3sum;
using testing::kB3sumInstallHint;
using testing::TempDir;

std::vector<std::uint8_t> RandomBytes(std::mt19937& rng, std::size_t size) {
  std::vector<std::uint8_t> bytes(size);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
  return bytes;
}

// Lengths around every block, chunk and tree boundary that has tripped implementations up:
// short last blocks, exactly full chunks (which must not be merged before Finalize), and
// non-power-of-two chunk counts. Plus random lengths from a fixed seed.
std::vector<std::size_t> OracleLengths() {
  std::vector<std::size_t> lengths = {0,    1,     63,    64,    65,    1023,   1024,
                                      1025, 2048,  2049,  3072,  4096,  4097,   5121,
                                      8192, 16385, 31744, 65536, 65537, 100000, 512 * 1024};
  std::mt19937 rng(0xB1A4E3);
  std::uniform_int_distribution<std::size_t> dist(0, 300000);
  for (int i = 0; i < 40; ++i) lengths.push_back(dist(rng));
  return lengths;
}

TEST(Blake3, EmptyInputHasTheWellKnownDigest) {
  EXPECT_EQ(ToHex(Blake3({})), "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
  EXPECT_EQ(ToHex(Blake3Hasher().Finalize()), ToHex(Blake3({})));
}

TEST(Blake3, MatchesB3sumAcrossLengths) {
  const std::string b3sum = FindB3sum();
  ASSERT_FALSE(b3sum.empty()) << kB3sumInstallHint;
  TempDir dir("blake3_test");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  std::mt19937 rng(20240601);
  int checked = 0;
  for (const std::size_t length : OracleLengths()) {
    const auto bytes = RandomBytes(rng, length);
    const std::string expected = B3sumHex(b3sum, dir, bytes);
    ASSERT_EQ(expected.size(), 64u)
        << "b3sum failed on length " << length << "; " << kB3sumInstallHint;
    EXPECT_EQ(ToHex(Blake3(bytes)), expected) << "length " << length;
    ++checked;
  }
  RecordProperty("lengths_checked", checked);
}

TEST(Blake3, TwelveZeroBytesMatchB3sum) {
  // The reference's NONE_HASH is the digest of 12 zero bytes.
  const std::vector<std::uint8_t> zeros(12, 0);
  const std::string ours = ToHex(Blake3(zeros));
  EXPECT_EQ(ours, "7e3eff9ef7613a50340eb12677ee03b83ac759fcba9bb32705f07248d56d473b");
  const std::string b3sum = FindB3sum();
  ASSERT_FALSE(b3sum.empty()) << kB3sumInstallHint;
  TempDir dir("blake3_test");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  EXPECT_EQ(ours, B3sumHex(b3sum, dir, zeros));
}

TEST(Blake3, IncrementalUpdatesEqualOneShot) {
  std::mt19937 rng(7);
  for (const std::size_t length : {0u, 1u, 64u, 1024u, 1025u, 3072u, 70000u, 300001u}) {
    const auto bytes = RandomBytes(rng, length);
    const Blake3Digest expected = Blake3(bytes);
    // Piece sizes from empty to several chunks, so splits land everywhere relative to blocks.
    for (const std::size_t max_piece : {1u, 65u, 1100u, 5000u}) {
      std::uniform_int_distribution<std::size_t> piece(0, max_piece);
      Blake3Hasher hasher;
      std::size_t offset = 0;
      while (offset < length) {
        const std::size_t n = std::min(piece(rng), length - offset);
        hasher.Update(std::span(bytes).subspan(offset, n));
        offset += n;
      }
      EXPECT_EQ(hasher.Finalize(), expected) << "length " << length << " max_piece " << max_piece;
    }
  }
}

TEST(Blake3, FinalizeDoesNotModifyTheState) {
  std::mt19937 rng(11);
  const auto bytes = RandomBytes(rng, 9000);
  Blake3Hasher hasher;
  std::size_t offset = 0;
  for (const std::size_t n : {0u, 100u, 924u, 1024u, 1u, 2047u, 64u, 4840u}) {
    hasher.Update(bytes.data() + offset, n);
    offset += n;
    // Finalizing mid-stream gives the prefix's digest, and twice gives the same answer.
    EXPECT_EQ(hasher.Finalize(), Blake3(std::span(bytes).first(offset))) << offset;
    EXPECT_EQ(hasher.Finalize(), hasher.Finalize());
  }
  ASSERT_EQ(offset, bytes.size());
  EXPECT_EQ(hasher.Finalize(), Blake3(bytes));
}

TEST(Blake3, ResetReturnsToTheEmptyState) {
  std::mt19937 rng(13);
  const auto first = RandomBytes(rng, 5000);
  const auto second = RandomBytes(rng, 700);
  Blake3Hasher hasher;
  hasher.Update(first);
  hasher.Reset();
  EXPECT_EQ(hasher.Finalize(), Blake3({}));
  hasher.Update(second);
  EXPECT_EQ(hasher.Finalize(), Blake3(second));
}

TEST(Blake3, ToHexPrintsBytesInOrderInLowercase) {
  Blake3Digest digest{};
  digest[0] = 0xAB;
  digest[31] = 0x0F;
  const std::string hex = ToHex(digest);
  ASSERT_EQ(hex.size(), 64u);
  EXPECT_EQ(hex.substr(0, 2), "ab");
  EXPECT_EQ(hex.substr(62, 2), "0f");
}

}  // namespace
}  // namespace lmcache
