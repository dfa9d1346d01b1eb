#include "worker/token_hasher.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/blake3.h"
#include "fakes/b3sum_oracle.h"

namespace lmcache::worker {
namespace {

using testing::B3sumHex;
using testing::FindB3sum;
using testing::kB3sumInstallHint;
using testing::TempDir;

// b3sum's hex digest of prefix || tokens as 4-byte big-endian ("" on error). The byte layout
// is written out here independently of the code under test.
std::string OracleHex(const std::string& b3sum, const TempDir& dir, const ChunkHash& prefix,
                      const std::vector<std::uint32_t>& tokens) {
  std::vector<std::uint8_t> bytes(prefix.begin(), prefix.end());
  for (const std::uint32_t t : tokens) {
    bytes.push_back(static_cast<std::uint8_t>((t >> 24) & 0xff));
    bytes.push_back(static_cast<std::uint8_t>((t >> 16) & 0xff));
    bytes.push_back(static_cast<std::uint8_t>((t >> 8) & 0xff));
    bytes.push_back(static_cast<std::uint8_t>(t & 0xff));
  }
  return B3sumHex(b3sum, dir, bytes);
}

std::vector<std::uint32_t> RandomTokens(std::mt19937& rng, std::size_t n) {
  std::vector<std::uint32_t> tokens(n);
  for (auto& t : tokens) t = static_cast<std::uint32_t>(rng());
  return tokens;
}

ChunkHash RandomHash(std::mt19937& rng) {
  ChunkHash h;
  for (auto& b : h) b = static_cast<std::uint8_t>(rng());
  return h;
}

TEST(TokenHasher, NoneHashIsBlake3OfTwelveZeroBytes) {
  EXPECT_EQ(ToHex(NoneHash()), "7e3eff9ef7613a50340eb12677ee03b83ac759fcba9bb32705f07248d56d473b");
}

TEST(TokenHasher, HashChunkMatchesB3sumOfPrefixAndBigEndianTokens) {
  const std::string b3sum = FindB3sum();
  ASSERT_FALSE(b3sum.empty()) << kB3sumInstallHint;
  TempDir dir("token_hasher_test");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  std::mt19937 rng(0x70CE);
  // Token counts around the hasher's 1 KiB staging block (256 tokens) and BLAKE3's chunk.
  for (const std::size_t n : {0u, 1u, 3u, 16u, 255u, 256u, 257u, 511u, 512u, 1000u, 4096u}) {
    const ChunkHash prefix = n % 2 == 0 ? NoneHash() : RandomHash(rng);
    const auto tokens = RandomTokens(rng, n);
    const std::string expected = OracleHex(b3sum, dir, prefix, tokens);
    ASSERT_EQ(expected.size(), 64u) << "b3sum failed; " << kB3sumInstallHint;
    EXPECT_EQ(ToHex(HashChunk(prefix, tokens)), expected) << n << " tokens";
  }
}

TEST(TokenHasher, TokensAreBigEndian) {
  const std::string b3sum = FindB3sum();
  ASSERT_FALSE(b3sum.empty()) << kB3sumInstallHint;
  TempDir dir("token_hasher_test");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  const std::vector<std::uint32_t> tokens = {0x01020304u, 0xff000000u, 0x000000ffu, 0xffffffffu};
  EXPECT_EQ(ToHex(HashChunk(NoneHash(), tokens)), OracleHex(b3sum, dir, NoneHash(), tokens));
  const std::vector<std::uint32_t> swapped = {0x04030201u, 0x000000ffu, 0xff000000u, 0xffffffffu};
  EXPECT_NE(HashChunk(NoneHash(), tokens), HashChunk(NoneHash(), swapped));
}

TEST(TokenHasher, HashChunksEqualsChainedHashChunk) {
  std::mt19937 rng(1);
  const std::size_t chunk = 16;
  const auto tokens = RandomTokens(rng, 5 * chunk + 7);  // a trailing partial chunk
  const auto hashes = HashChunks(tokens, chunk, 0, 5, NoneHash());
  ASSERT_EQ(hashes.size(), 5u);
  ChunkHash previous = NoneHash();
  for (std::size_t i = 0; i < 5; ++i) {
    previous = HashChunk(previous, std::span(tokens).subspan(i * chunk, chunk));
    EXPECT_EQ(hashes[i], previous) << "chunk " << i;
  }
}

TEST(TokenHasher, SuffixFromAMiddlePrefixMatchesTheFullComputation) {
  std::mt19937 rng(2);
  const std::size_t chunk = 8;
  const auto tokens = RandomTokens(rng, 6 * chunk);
  const auto full = HashChunks(tokens, chunk, 0, 6, NoneHash());
  const auto suffix = HashChunks(tokens, chunk, 3, 3, full[2]);
  ASSERT_EQ(suffix.size(), 3u);
  EXPECT_EQ(suffix[0], full[3]);
  EXPECT_EQ(suffix[1], full[4]);
  EXPECT_EQ(suffix[2], full[5]);
  EXPECT_EQ(HashChunks(tokens, chunk, 5, 1, full[4]).front(), full[5]);
}

TEST(TokenHasher, ZeroCountGivesNoHashes) {
  const std::vector<std::uint32_t> tokens(8, 1);
  EXPECT_TRUE(HashChunks(tokens, 4, 0, 0, NoneHash()).empty());
}

TEST(TokenHasher, ChangingChunkZeroChangesEveryLaterHash) {
  std::mt19937 rng(3);
  const std::size_t chunk = 4;
  auto tokens = RandomTokens(rng, 4 * chunk);
  const auto before = HashChunks(tokens, chunk, 0, 4, NoneHash());
  tokens[1] ^= 1;
  const auto after = HashChunks(tokens, chunk, 0, 4, NoneHash());
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NE(before[i], after[i]) << "chunk " << i;
}

TEST(TokenHasher, ChangingChunkTwoKeepsEarlierHashes) {
  std::mt19937 rng(4);
  const std::size_t chunk = 4;
  auto tokens = RandomTokens(rng, 4 * chunk);
  const auto before = HashChunks(tokens, chunk, 0, 4, NoneHash());
  tokens[2 * chunk + 3] += 1;
  const auto after = HashChunks(tokens, chunk, 0, 4, NoneHash());
  EXPECT_EQ(before[0], after[0]);
  EXPECT_EQ(before[1], after[1]);
  EXPECT_NE(before[2], after[2]);
  EXPECT_NE(before[3], after[3]);
}

TEST(TokenHasher, SameChunkWithAnotherPrefixHashesDifferently) {
  const std::vector<std::uint32_t> tokens = {7, 8, 9, 10};
  ChunkHash other = NoneHash();
  other[31] ^= 1;
  EXPECT_NE(HashChunk(NoneHash(), tokens), HashChunk(other, tokens));
}

}  // namespace
}  // namespace lmcache::worker
