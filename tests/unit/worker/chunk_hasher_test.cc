// ChunkHasher: rolling chunk hashes equal to hashing from scratch, with and
// without its cache, whatever the order prompts come in, and from several
// threads at once.
#include "worker/chunk_hasher.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

namespace lmcache::worker {
namespace {

constexpr std::size_t kChunk = 16;  // above kUncachedChunkTokens: the cache is used

std::vector<std::uint32_t> Prompt(std::size_t n, std::uint32_t first = 100) {
  std::vector<std::uint32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// The reference: every full chunk of `tokens` hashed from scratch.
std::vector<store::ChunkHash> Expected(const std::vector<std::uint32_t>& tokens) {
  return HashChunks(tokens, kChunk, 0, tokens.size() / kChunk, NoneHash());
}

class ChunkHasherTest : public ::testing::TestWithParam<std::size_t> {
 protected:
  // Hashes of chunks [first, last) (the whole prompt is hashed up to `last`).
  std::vector<store::ChunkHash> HashesOf(const std::vector<std::uint32_t>& tokens,
                                         std::size_t first, std::size_t last) {
    last = std::min(last, tokens.size() / kChunk);
    std::vector<store::ChunkHash> all = hasher_.Hashes(tokens, kChunk, last);
    if (first >= last) return {};
    return {all.begin() + static_cast<std::ptrdiff_t>(first), all.end()};
  }
  ChunkHasher hasher_{GetParam()};
};

// With no cache, a small one that must evict (four entries a shard), and a
// large one.
INSTANTIATE_TEST_SUITE_P(CacheSizes, ChunkHasherTest, ::testing::Values(0, 16384, 1u << 20));

TEST_P(ChunkHasherTest, HashesEqualHashChunks) {
  const auto tokens = Prompt(5 * kChunk);
  EXPECT_EQ(HashesOf(tokens, 0, 5), Expected(tokens));
}

TEST_P(ChunkHasherTest, ReturnsTheRequestedRange) {
  const auto tokens = Prompt(5 * kChunk);
  const auto all = Expected(tokens);
  EXPECT_EQ(HashesOf(tokens, 1, 3),
            std::vector<store::ChunkHash>(all.begin() + 1, all.begin() + 3));
  EXPECT_EQ(HashesOf(tokens, 4, 5), std::vector<store::ChunkHash>{all[4]});
  EXPECT_TRUE(HashesOf(tokens, 3, 3).empty());
}

TEST_P(ChunkHasherTest, PartialTrailingChunkIsNeverHashed) {
  const auto tokens = Prompt(2 * kChunk + 3);
  const auto hashes = HashesOf(tokens, 0, 100);
  EXPECT_EQ(hashes.size(), 2u);
  EXPECT_EQ(hashes, Expected(tokens));
  EXPECT_TRUE(HashesOf(tokens, 2, 3).empty());
}

TEST_P(ChunkHasherTest, LongerPromptSharingThePrefixExtendsTheHashes) {
  const auto longer = Prompt(6 * kChunk);
  const std::vector<std::uint32_t> shorter(longer.begin(), longer.begin() + 2 * kChunk + 1);
  const auto first = HashesOf(shorter, 0, 10);
  ASSERT_EQ(first.size(), 2u);
  const auto extended = HashesOf(longer, 0, 10);
  ASSERT_EQ(extended.size(), 6u);
  EXPECT_EQ(extended[0], first[0]);
  EXPECT_EQ(extended[1], first[1]);
  EXPECT_EQ(extended, Expected(longer));
}

TEST_P(ChunkHasherTest, IncrementalRequestsMatchOneShot) {
  const auto tokens = Prompt(6 * kChunk);
  const auto all = Expected(tokens);
  EXPECT_EQ(HashesOf(tokens, 0, 2),
            std::vector<store::ChunkHash>(all.begin(), all.begin() + 2));
  EXPECT_EQ(HashesOf(tokens, 4, 6),
            std::vector<store::ChunkHash>(all.begin() + 4, all.end()));
  EXPECT_EQ(HashesOf(tokens, 0, 6), all);
}

TEST_P(ChunkHasherTest, DifferentPromptIsRecomputed) {
  const auto a = Prompt(4 * kChunk, 100);
  const auto b = Prompt(4 * kChunk, 900);
  ASSERT_EQ(HashesOf(a, 0, 4), Expected(a));
  EXPECT_EQ(HashesOf(b, 0, 4), Expected(b));
  EXPECT_NE(Expected(a)[0], Expected(b)[0]);
}

TEST_P(ChunkHasherTest, PromptDivergingMidwayRecomputesFromTheDivergence) {
  const auto a = Prompt(4 * kChunk);
  auto b = a;
  b[2 * kChunk + 1] += 1000;  // chunk 2 differs
  ASSERT_EQ(HashesOf(a, 0, 4), Expected(a));
  const auto hashes = HashesOf(b, 0, 4);
  EXPECT_EQ(hashes, Expected(b));
  EXPECT_EQ(hashes[1], Expected(a)[1]);
  EXPECT_NE(hashes[2], Expected(a)[2]);
}

TEST_P(ChunkHasherTest, ShorterPromptThenTheLongerOneAgain) {
  const auto a = Prompt(4 * kChunk);
  const std::vector<std::uint32_t> head(a.begin(), a.begin() + kChunk + 2);
  ASSERT_EQ(HashesOf(a, 0, 4), Expected(a));
  EXPECT_EQ(HashesOf(head, 0, 4), Expected(head));
  EXPECT_EQ(HashesOf(a, 0, 4), Expected(a));
}

TEST_P(ChunkHasherTest, SharedPrefixesHitTheCache) {
  const auto system_prompt = Prompt(8 * kChunk);
  auto a = system_prompt;
  auto b = system_prompt;
  for (std::uint32_t t = 0; t < 2 * kChunk; ++t) {
    a.push_back(7000 + t);
    b.push_back(9000 + t);
  }
  EXPECT_EQ(HashesOf(a, 0, 10), Expected(a));
  const std::uint64_t hits_before = hasher_.Stats().hits;
  EXPECT_EQ(HashesOf(b, 0, 10), Expected(b));
  const ChunkHasherStats stats = hasher_.Stats();
  if (GetParam() >= (1u << 20)) {
    EXPECT_EQ(stats.hits - hits_before, 8u);  // the 8 chunks of the shared system prompt
  }
  EXPECT_LE(stats.bytes, GetParam());
}

// `n` two-chunk prompts: n different first chunks, then one same chunk.
std::vector<std::vector<std::uint32_t>> OneChunkAfterPrefixes(std::uint32_t n) {
  const auto shared_chunk = Prompt(kChunk, 50000);
  std::vector<std::vector<std::uint32_t>> prompts;
  for (std::uint32_t k = 0; k < n; ++k) {
    auto prompt = Prompt(kChunk, 1000 * (k + 1));
    prompt.insert(prompt.end(), shared_chunk.begin(), shared_chunk.end());
    prompts.push_back(prompt);
  }
  return prompts;
}

// The same chunk after different prefixes: each (prefix, chunk) keeps its
// own entry, up to 8 for one chunk's tokens (a lookup compares each; more
// would let one chunk repeated after many prefixes slow every lookup of it),
// and the hashes stay right whatever was evicted.
TEST_P(ChunkHasherTest, OneChunkAfterManyPrefixesKeepsAtMostEightEntries) {
  const auto prompts = OneChunkAfterPrefixes(12);
  for (const auto& prompt : prompts) EXPECT_EQ(HashesOf(prompt, 0, 2), Expected(prompt));
  if (GetParam() >= (1u << 20)) {
    EXPECT_EQ(hasher_.Stats().entries, 12u + 8u);  // 12 first chunks, 8 of the shared one
  }
  // The newest prefix's entry was kept, the oldest's evicted.
  const std::uint64_t hits_before = hasher_.Stats().hits;
  EXPECT_EQ(HashesOf(prompts[11], 0, 2), Expected(prompts[11]));
  if (GetParam() >= (1u << 20)) {
    EXPECT_EQ(hasher_.Stats().hits - hits_before, 2u);
  }
  EXPECT_EQ(HashesOf(prompts[0], 0, 2), Expected(prompts[0]));
  if (GetParam() >= (1u << 20)) {
    EXPECT_EQ(hasher_.Stats().hits - hits_before, 3u);
    EXPECT_EQ(hasher_.Stats().entries, 12u + 8u);
  }
  for (const auto& prompt : prompts) EXPECT_EQ(HashesOf(prompt, 0, 2), Expected(prompt));
}

// Of several entries for one chunk's tokens, the one a lookup used counts as
// used (it is known once the chain is): the 9th prefix evicts another.
TEST_P(ChunkHasherTest, TheEntryALookupUsedIsKeptOverItsSiblings) {
  if (GetParam() < (1u << 20)) GTEST_SKIP() << "needs room for every entry";
  const auto prompts = OneChunkAfterPrefixes(9);
  for (std::size_t k = 0; k < 8; ++k) EXPECT_EQ(HashesOf(prompts[k], 0, 2), Expected(prompts[k]));
  EXPECT_EQ(HashesOf(prompts[0], 0, 2), Expected(prompts[0]));  // uses the oldest entry
  EXPECT_EQ(HashesOf(prompts[8], 0, 2), Expected(prompts[8]));  // a 9th: evicts the next oldest
  std::uint64_t hits = hasher_.Stats().hits;
  EXPECT_EQ(HashesOf(prompts[0], 0, 2), Expected(prompts[0]));
  EXPECT_EQ(hasher_.Stats().hits - hits, 2u);
  hits = hasher_.Stats().hits;
  EXPECT_EQ(HashesOf(prompts[1], 0, 2), Expected(prompts[1]));
  EXPECT_EQ(hasher_.Stats().hits - hits, 1u);  // its first chunk only
}

// One chunk repeated through a prompt, with several entries cached for its
// tokens: every occurrence gets the right hash (the occurrences share one
// list of the entries).
TEST_P(ChunkHasherTest, APromptRepeatingOneChunkHashesRight) {
  const auto chunk = Prompt(kChunk, 70000);
  for (std::uint32_t k = 0; k < 10; ++k) {  // the chunk after ten other prefixes
    auto prompt = Prompt(kChunk, 2000 * (k + 1));
    prompt.insert(prompt.end(), chunk.begin(), chunk.end());
    EXPECT_EQ(HashesOf(prompt, 0, 2), Expected(prompt));
  }
  std::vector<std::uint32_t> repeated;
  for (int r = 0; r < 200; ++r) repeated.insert(repeated.end(), chunk.begin(), chunk.end());
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(hasher_.Hashes(repeated, kChunk, 200), Expected(repeated)) << "round " << round;
  }
}

// Two models at different chunk sizes share the cache: the same prompt
// hashed at 4, 8 and 1 tokens, interleaved and again, gives each size its
// own hashes from scratch, never another size's cached entry.
TEST_P(ChunkHasherTest, ChunkSizesSharingTheCacheKeepTheirOwnHashes) {
  const auto tokens = Prompt(8 * kChunk);
  for (int round = 0; round < 2; ++round) {
    for (const std::size_t size : {kChunk, 2 * kChunk, std::size_t{1}}) {
      const std::size_t count = tokens.size() / size;
      EXPECT_EQ(hasher_.Hashes(tokens, size, count), HashChunks(tokens, size, 0, count, NoneHash()))
          << "chunk size " << size << ", round " << round;
    }
  }
}

// Chunks of up to kUncachedChunkTokens tokens are hashed afresh every time:
// the same prompt twice gives the same hashes, and leaves the cache empty.
TEST_P(ChunkHasherTest, SmallChunksBypassTheCache) {
  const auto tokens = Prompt(64);
  for (const std::size_t size : {std::size_t{1}, kUncachedChunkTokens}) {
    const std::size_t count = tokens.size() / size;
    for (int round = 0; round < 2; ++round) {
      EXPECT_EQ(hasher_.Hashes(tokens, size, count),
                HashChunks(tokens, size, 0, count, NoneHash()));
    }
  }
  const ChunkHasherStats stats = hasher_.Stats();
  EXPECT_EQ(stats.entries, 0u);
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.misses, 2 * (64 + 64 / kUncachedChunkTokens));
  // One size above: the second pass hits (when there is room).
  const std::size_t size = kUncachedChunkTokens + 1;
  (void)hasher_.Hashes(tokens, size, tokens.size() / size);
  (void)hasher_.Hashes(tokens, size, tokens.size() / size);
  if (GetParam() >= (1u << 20)) {
    EXPECT_EQ(hasher_.Stats().hits, tokens.size() / size);
  }
}

// Threads hashing prompts that share prefixes, repeat chunks and hold one
// chunk after many prefixes, all at once: every hash is right while entries
// are found, inserted (the same one by two threads racing) and evicted on
// other threads (the small cache evicts all the time). TSan runs it too.
TEST_P(ChunkHasherTest, ThreadsHashingAtOnceGetTheHashesFromScratch) {
  std::vector<std::vector<std::uint32_t>> prompts = OneChunkAfterPrefixes(10);
  for (std::uint32_t p = 0; p < 6; ++p) {  // a system prompt, then each its own turn
    auto prompt = Prompt(6 * kChunk);
    const auto own = Prompt((p + 1) * kChunk, 30000 + 1000 * p);
    prompt.insert(prompt.end(), own.begin(), own.end());
    prompts.push_back(prompt);
  }
  std::vector<std::uint32_t> repeated;
  for (int r = 0; r < 40; ++r)
    repeated.insert(repeated.end(), prompts[0].begin() + kChunk, prompts[0].end());
  prompts.push_back(repeated);
  std::vector<std::vector<store::ChunkHash>> expected;
  for (const auto& prompt : prompts) expected.push_back(Expected(prompt));

  constexpr int kThreads = 4;
  constexpr int kRounds = 300;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<std::uint32_t>(t));
      for (int round = 0; round < kRounds; ++round) {
        const std::size_t p = random() % prompts.size();
        const std::size_t count = 1 + random() % (prompts[p].size() / kChunk);
        const auto hashes = hasher_.Hashes(prompts[p], kChunk, count);
        if (hashes !=
            std::vector<store::ChunkHash>(expected[p].begin(), expected[p].begin() + count)) {
          ++wrong[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  EXPECT_LE(hasher_.Stats().bytes, GetParam());
  if (GetParam() >= (1u << 20)) {
    EXPECT_GT(hasher_.Stats().hits, 0u);
  }
}

}  // namespace
}  // namespace lmcache::worker
