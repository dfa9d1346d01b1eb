#include "server/session.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "fakes/fake_clock.h"
#include "server/token_hasher.h"

namespace lmcache::server {
namespace {

constexpr std::size_t kChunk = 4;
constexpr TimeMs kTtlMs = 600'000;

std::vector<std::uint32_t> Prompt(std::size_t n, std::uint32_t first = 100) {
  std::vector<std::uint32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// The reference: every full chunk of `tokens` hashed from scratch.
std::vector<store::ChunkHash> Expected(const std::vector<std::uint32_t>& tokens) {
  return HashChunks(tokens, kChunk, 0, tokens.size() / kChunk, NoneHash());
}

std::vector<store::ChunkHash> HashesOf(Session& session, const std::vector<std::uint32_t>& tokens,
                                       std::size_t first, std::size_t last) {
  MutexLock lock(&session.mu);
  return session.Hashes(tokens, kChunk, first, last);
}

// --- Session::Hashes ----------------------------------------------------------------------

TEST(Session, HashesEqualHashChunks) {
  Session session;
  const auto tokens = Prompt(5 * kChunk);
  EXPECT_EQ(HashesOf(session, tokens, 0, 5), Expected(tokens));
}

TEST(Session, ReturnsTheRequestedRange) {
  Session session;
  const auto tokens = Prompt(5 * kChunk);
  const auto all = Expected(tokens);
  EXPECT_EQ(HashesOf(session, tokens, 1, 3),
            std::vector<store::ChunkHash>(all.begin() + 1, all.begin() + 3));
  EXPECT_EQ(HashesOf(session, tokens, 4, 5), std::vector<store::ChunkHash>{all[4]});
  EXPECT_TRUE(HashesOf(session, tokens, 3, 3).empty());
}

TEST(Session, PartialTrailingChunkIsNeverHashed) {
  Session session;
  const auto tokens = Prompt(2 * kChunk + 3);
  const auto hashes = HashesOf(session, tokens, 0, 100);
  EXPECT_EQ(hashes.size(), 2u);
  EXPECT_EQ(hashes, Expected(tokens));
  EXPECT_TRUE(HashesOf(session, tokens, 2, 3).empty());
}

TEST(Session, LongerPromptSharingThePrefixExtendsTheHashes) {
  Session session;
  const auto longer = Prompt(6 * kChunk);
  const std::vector<std::uint32_t> shorter(longer.begin(), longer.begin() + 2 * kChunk + 1);
  const auto first = HashesOf(session, shorter, 0, 10);
  ASSERT_EQ(first.size(), 2u);
  const auto extended = HashesOf(session, longer, 0, 10);
  ASSERT_EQ(extended.size(), 6u);
  EXPECT_EQ(extended[0], first[0]);
  EXPECT_EQ(extended[1], first[1]);
  EXPECT_EQ(extended, Expected(longer));
}

TEST(Session, IncrementalRequestsMatchOneShot) {
  Session session;
  const auto tokens = Prompt(6 * kChunk);
  const auto all = Expected(tokens);
  EXPECT_EQ(HashesOf(session, tokens, 0, 2),
            std::vector<store::ChunkHash>(all.begin(), all.begin() + 2));
  EXPECT_EQ(HashesOf(session, tokens, 4, 6),
            std::vector<store::ChunkHash>(all.begin() + 4, all.end()));
  EXPECT_EQ(HashesOf(session, tokens, 0, 6), all);
}

TEST(Session, DifferentPromptIsRecomputed) {
  Session session;
  const auto a = Prompt(4 * kChunk, 100);
  const auto b = Prompt(4 * kChunk, 900);
  ASSERT_EQ(HashesOf(session, a, 0, 4), Expected(a));
  EXPECT_EQ(HashesOf(session, b, 0, 4), Expected(b));
  EXPECT_NE(Expected(a)[0], Expected(b)[0]);
}

TEST(Session, PromptDivergingMidwayRecomputesFromTheDivergence) {
  Session session;
  const auto a = Prompt(4 * kChunk);
  auto b = a;
  b[2 * kChunk + 1] += 1000;  // chunk 2 differs
  ASSERT_EQ(HashesOf(session, a, 0, 4), Expected(a));
  const auto hashes = HashesOf(session, b, 0, 4);
  EXPECT_EQ(hashes, Expected(b));
  EXPECT_EQ(hashes[1], Expected(a)[1]);
  EXPECT_NE(hashes[2], Expected(a)[2]);
}

TEST(Session, ShorterPromptThenTheLongerOneAgain) {
  Session session;
  const auto a = Prompt(4 * kChunk);
  const std::vector<std::uint32_t> head(a.begin(), a.begin() + kChunk + 2);
  ASSERT_EQ(HashesOf(session, a, 0, 4), Expected(a));
  EXPECT_EQ(HashesOf(session, head, 0, 4), Expected(head));
  EXPECT_EQ(HashesOf(session, a, 0, 4), Expected(a));
}

// --- SessionManager -----------------------------------------------------------------------

class SessionManagerTest : public ::testing::Test {
 protected:
  testing::FakeClock clock_;
  SessionManager sessions_{&clock_, kTtlMs, 3};
};

TEST_F(SessionManagerTest, GetOrCreateCreatesOnceThenReturnsTheSame) {
  auto first = sessions_.GetOrCreate("req-1");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(sessions_.GetOrCreate("req-1"), first);
  EXPECT_EQ(sessions_.size(), 1u);
  auto other = sessions_.GetOrCreate("req-2");
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other, first);
  EXPECT_EQ(sessions_.size(), 2u);
}

TEST_F(SessionManagerTest, FindDoesNotCreate) {
  EXPECT_EQ(sessions_.Find("req-1"), nullptr);
  EXPECT_EQ(sessions_.size(), 0u);
  auto session = sessions_.GetOrCreate("req-1");
  EXPECT_EQ(sessions_.Find("req-1"), session);
}

TEST_F(SessionManagerTest, RemoveReturnsTheSessionOnce) {
  auto session = sessions_.GetOrCreate("req-1");
  EXPECT_EQ(sessions_.Remove("req-1"), session);
  EXPECT_EQ(sessions_.Remove("req-1"), nullptr);
  EXPECT_EQ(sessions_.Find("req-1"), nullptr);
  EXPECT_EQ(sessions_.size(), 0u);
  EXPECT_NE(sessions_.GetOrCreate("req-1"), session);  // a fresh one
}

TEST_F(SessionManagerTest, SessionStateSurvivesBetweenLookups) {
  {
    auto session = sessions_.GetOrCreate("req-1");
    MutexLock lock(&session->mu);
    session->lookup().hit_chunks = 7;
  }
  auto again = sessions_.Find("req-1");
  ASSERT_NE(again, nullptr);
  MutexLock lock(&again->mu);
  EXPECT_EQ(again->lookup().hit_chunks, 7u);
}

TEST_F(SessionManagerTest, UseRefreshesTheIdleTimer) {
  ASSERT_NE(sessions_.GetOrCreate("busy"), nullptr);
  ASSERT_NE(sessions_.GetOrCreate("idle"), nullptr);
  std::size_t expired = 0;
  for (int step = 0; step < 5; ++step) {  // 2000 s in steps of 400 s
    clock_.Advance(400'000);
    ASSERT_NE(sessions_.Find("busy"), nullptr) << "step " << step;
    expired += sessions_.ExpireIdle();
  }
  EXPECT_EQ(expired, 1u);
  EXPECT_NE(sessions_.Find("busy"), nullptr);
  EXPECT_EQ(sessions_.Find("idle"), nullptr);
}

TEST_F(SessionManagerTest, IdleSessionExpiresOnlyAfterTheTtl) {
  ASSERT_NE(sessions_.GetOrCreate("req-1"), nullptr);
  clock_.Advance(kTtlMs - 1);
  EXPECT_EQ(sessions_.ExpireIdle(), 0u);
  EXPECT_EQ(sessions_.size(), 1u);
  clock_.Advance(2);
  EXPECT_EQ(sessions_.ExpireIdle(), 1u);
  EXPECT_EQ(sessions_.size(), 0u);
}

TEST_F(SessionManagerTest, ExpireIdleReturnsTheCount) {
  sessions_.GetOrCreate("a");
  sessions_.GetOrCreate("b");
  clock_.Advance(kTtlMs / 2);
  sessions_.GetOrCreate("c");
  clock_.Advance(kTtlMs / 2 + 1);
  EXPECT_EQ(sessions_.ExpireIdle(), 2u);
  EXPECT_EQ(sessions_.size(), 1u);
  EXPECT_NE(sessions_.Find("c"), nullptr);
  EXPECT_EQ(sessions_.ExpireIdle(), 0u);
}

TEST_F(SessionManagerTest, FullWithNoneExpiredRefusesNewSessions) {
  ASSERT_NE(sessions_.GetOrCreate("a"), nullptr);
  ASSERT_NE(sessions_.GetOrCreate("b"), nullptr);
  ASSERT_NE(sessions_.GetOrCreate("c"), nullptr);
  EXPECT_EQ(sessions_.GetOrCreate("d"), nullptr);
  EXPECT_EQ(sessions_.size(), 3u);
  EXPECT_NE(sessions_.GetOrCreate("a"), nullptr);  // existing ones are still served
}

TEST_F(SessionManagerTest, FullMakesRoomByExpiringIdleSessions) {
  ASSERT_NE(sessions_.GetOrCreate("a"), nullptr);
  ASSERT_NE(sessions_.GetOrCreate("b"), nullptr);
  clock_.Advance(kTtlMs / 2);
  ASSERT_NE(sessions_.GetOrCreate("c"), nullptr);
  clock_.Advance(kTtlMs / 2 + 1);  // a and b are idle past the TTL, c is not
  EXPECT_NE(sessions_.GetOrCreate("d"), nullptr);
  EXPECT_EQ(sessions_.size(), 2u);
  EXPECT_EQ(sessions_.Find("a"), nullptr);
  EXPECT_NE(sessions_.Find("c"), nullptr);
}

}  // namespace
}  // namespace lmcache::server
