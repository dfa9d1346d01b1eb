// Sessions: lookups per tenant, what a replaced lookup hands back, idle
// expiry, and the count and byte caps (least recently used dropped first).
#include "worker/session.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "fakes/fake_clock.h"

namespace lmcache::worker {
namespace {

constexpr TimeMs kTtlMs = 600'000;

// --- Session ------------------------------------------------------------------------------

TEST(Session, EachTenantHasItsOwnLookup) {
  Session session(1, nullptr);
  MutexLock lock(&session.mu);
  ASSERT_TRUE(session.BeginLookup("a", 16).ok());
  session.FindLookup("a")->leases = {10};
  ASSERT_TRUE(session.BeginLookup("b", 16).ok());
  session.FindLookup("b")->leases = {20};
  EXPECT_EQ(session.ConsumableLeases("a"), std::vector<store::LeaseId>{10});
  EXPECT_EQ(session.ConsumableLeases("b"), std::vector<store::LeaseId>{20});
  EXPECT_TRUE(session.ConsumableLeases("c").empty());
}

TEST(Session, AnUnreportedLookupIsReleasedWhenReplaced) {
  Session session(1, nullptr);
  MutexLock lock(&session.mu);
  ASSERT_TRUE(session.BeginLookup("", 16).ok());
  session.FindLookup("")->leases = {10};
  auto release = session.BeginLookup("", 16);
  ASSERT_TRUE(release.ok());
  EXPECT_EQ(release->leases, std::vector<store::LeaseId>{10});  // nobody saw it
  EXPECT_TRUE(session.ConsumableLeases("").empty());
}

TEST(Session, AReportedLookupStaysConsumableWhenReplaced) {
  Session session(1, nullptr);
  MutexLock lock(&session.mu);
  ASSERT_TRUE(session.BeginLookup("", 16).ok());
  session.FindLookup("")->leases = {10};
  session.FindLookup("")->status_consumed = true;  // workers may be retrieving from it
  auto release = session.BeginLookup("", 16);
  ASSERT_TRUE(release.ok());
  EXPECT_TRUE(release->leases.empty());
  session.FindLookup("")->leases = {11};
  EXPECT_EQ(session.ConsumableLeases(""), (std::vector<store::LeaseId>{11, 10}));
  const LookupRelease all = session.TakeAll();
  EXPECT_EQ(all.leases.size(), 2u);
  EXPECT_TRUE(session.ConsumableLeases("").empty());
}

TEST(Session, TooManyTenantsForOneRequestIdAreRefused) {
  Session session(1, nullptr);
  MutexLock lock(&session.mu);
  ASSERT_TRUE(session.BeginLookup("a", 2).ok());
  ASSERT_TRUE(session.BeginLookup("b", 2).ok());
  EXPECT_EQ(session.BeginLookup("c", 2).status().code(), ErrorCode::kResourceExhausted);
  EXPECT_TRUE(session.BeginLookup("a", 2).ok());  // an existing tenant goes on
}

TEST(Session, StatusIsReportedOldestUnreportedFirst) {
  Session session(1, nullptr);
  MutexLock lock(&session.mu);
  ASSERT_TRUE(session.BeginLookup("a", 16).ok());
  session.FindLookup("a")->hit_chunks = 1;
  ASSERT_TRUE(session.BeginLookup("b", 16).ok());
  session.FindLookup("b")->hit_chunks = 2;
  EXPECT_EQ(session.StatusLookup()->hit_chunks, 1u);
  session.StatusLookup()->status_consumed = true;
  EXPECT_EQ(session.StatusLookup()->hit_chunks, 2u);
  session.StatusLookup()->status_consumed = true;
  EXPECT_EQ(session.StatusLookup()->hit_chunks, 2u);  // the newest, already reported
}

// --- SessionManager -----------------------------------------------------------------------

class SessionManagerTest : public ::testing::Test {
 protected:
  SessionManagerTest() : sessions_(&clock_, Limits(), [this](Session& s) { dropped_.push_back(&s); }) {}
  static SessionLimits Limits() {
    SessionLimits limits;
    limits.idle_ttl_ms = kTtlMs;
    limits.max_sessions = 3;
    limits.max_bytes = 64u << 10;
    return limits;
  }
  // Gives `session` a lookup of `chunks` hashes (its memory grows with them).
  static void Grow(Session& session, std::size_t chunks) {
    MutexLock lock(&session.mu);
    (void)session.BeginLookup("", 16);
    session.FindLookup("")->hashes.resize(chunks);
    session.Account();
  }

  testing::FakeClock clock_;
  std::vector<Session*> dropped_;
  SessionManager sessions_;
};

TEST_F(SessionManagerTest, GetOrCreateCreatesOnceThenReturnsTheSame) {
  auto first = sessions_.GetOrCreate("req-1");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(sessions_.GetOrCreate("req-1"), first);
  EXPECT_EQ(sessions_.size(), 1u);
  auto other = sessions_.GetOrCreate("req-2");
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other, first);
  EXPECT_NE(other->owner(), first->owner());  // owners never derive from the request id
  EXPECT_EQ(sessions_.size(), 2u);
}

TEST_F(SessionManagerTest, FindDoesNotCreate) {
  EXPECT_EQ(sessions_.Find("req-1"), nullptr);
  EXPECT_EQ(sessions_.size(), 0u);
  auto session = sessions_.GetOrCreate("req-1");
  EXPECT_EQ(sessions_.Find("req-1"), session);
}

TEST_F(SessionManagerTest, RemoveDropsTheSessionOnceAndReleasesIt) {
  auto session = sessions_.GetOrCreate("req-1");
  EXPECT_TRUE(sessions_.Remove("req-1"));
  EXPECT_FALSE(sessions_.Remove("req-1"));
  EXPECT_EQ(dropped_, std::vector<Session*>{session.get()});
  EXPECT_EQ(sessions_.Find("req-1"), nullptr);
  EXPECT_NE(sessions_.GetOrCreate("req-1"), session);  // a fresh one
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
  EXPECT_EQ(dropped_.size(), 1u);
}

TEST_F(SessionManagerTest, FullByCountDropsTheLeastRecentlyUsed) {
  ASSERT_NE(sessions_.GetOrCreate("a"), nullptr);
  ASSERT_NE(sessions_.GetOrCreate("b"), nullptr);
  ASSERT_NE(sessions_.GetOrCreate("c"), nullptr);
  ASSERT_NE(sessions_.Find("a"), nullptr);  // a is used again: b is now the idlest
  ASSERT_NE(sessions_.GetOrCreate("d"), nullptr);
  EXPECT_EQ(sessions_.size(), 3u);
  EXPECT_EQ(sessions_.Find("b"), nullptr);
  EXPECT_NE(sessions_.Find("a"), nullptr);
  EXPECT_EQ(dropped_.size(), 1u);
}

TEST_F(SessionManagerTest, MemoryIsCappedInBytesDroppingIdleSessionsFirst) {
  auto idle = sessions_.GetOrCreate("idle");
  Grow(*idle, 1200);  // 38 KB of hashes
  auto busy = sessions_.GetOrCreate("busy");
  Grow(*busy, 1200);
  EXPECT_GT(sessions_.bytes(), 64u << 10);
  EXPECT_EQ(sessions_.Trim(), 1u);
  EXPECT_EQ(sessions_.Find("idle"), nullptr);
  EXPECT_NE(sessions_.Find("busy"), nullptr);
  EXPECT_LE(sessions_.bytes(), 64u << 10);
  EXPECT_EQ(sessions_.dropped_for_memory(), 1u);
  EXPECT_EQ(dropped_, std::vector<Session*>{idle.get()});
}

TEST_F(SessionManagerTest, BytesFollowTheSessionsThatHoldThem) {
  auto a = sessions_.GetOrCreate("a");
  const std::size_t empty = sessions_.bytes();
  Grow(*a, 100);
  EXPECT_GE(sessions_.bytes(), empty + 100 * sizeof(store::ChunkHash));
  sessions_.Remove("a");
  EXPECT_EQ(sessions_.bytes(), 0u);
  Grow(*a, 200);  // a request still holding the dropped session changes nothing
  EXPECT_EQ(sessions_.bytes(), 0u);
}

// Issue 19: expiry, trimming and a closed connection work in steps of
// kSessionStep sessions per hold of the manager's mutex; stepping changes
// nothing about which sessions go.
TEST(SessionManagerSteps, AClosedConnectionsSessionsAreTakenAStepAtATime) {
  testing::FakeClock clock;
  SessionManager sessions(&clock, SessionLimits{}, nullptr);
  constexpr std::size_t kCount = 2 * kSessionStep + 7;
  for (std::size_t i = 0; i < kCount; ++i) {
    const std::string id = "burst-" + std::to_string(i);
    ASSERT_NE(sessions.GetOrCreate(id), nullptr);
    sessions.NoteConnection(id, "burst");
  }
  ASSERT_NE(sessions.GetOrCreate("other"), nullptr);
  sessions.NoteConnection("other", "other-client");
  std::size_t taken = 0;
  for (auto step = sessions.TakeConnection("burst"); !step.empty();
       step = sessions.TakeConnection("burst")) {
    EXPECT_LE(step.size(), kSessionStep);
    taken += step.size();
  }
  EXPECT_EQ(taken, kCount);
  EXPECT_EQ(sessions.TakeConnection("burst").size(), 0u);
  EXPECT_EQ(sessions.TakeConnection("other-client").size(), 1u);
}

TEST(SessionManagerSteps, ExpiryAndTrimOverSeveralStepsDropExactlyWhatTheyMust) {
  testing::FakeClock clock;
  SessionLimits limits;
  limits.idle_ttl_ms = 1000;
  std::size_t dropped = 0;
  SessionManager sessions(&clock, limits, [&dropped](Session&) { ++dropped; });
  constexpr std::size_t kOld = 3 * kSessionStep + 1;
  for (std::size_t i = 0; i < kOld; ++i)
    ASSERT_NE(sessions.GetOrCreate("old-" + std::to_string(i)), nullptr);
  clock.Advance(600);
  for (std::size_t i = 0; i < 10; ++i)
    ASSERT_NE(sessions.GetOrCreate("new-" + std::to_string(i)), nullptr);
  clock.Advance(400);  // the old ones are idle for the TTL, the new ones not
  EXPECT_EQ(sessions.ExpireIdle(), kOld);
  EXPECT_EQ(dropped, kOld);
  EXPECT_EQ(sessions.size(), 10u);
  EXPECT_NE(sessions.Find("new-0"), nullptr);
}

TEST(SessionManagerSteps, TrimOverSeveralStepsStopsAtTheCap) {
  testing::FakeClock clock;
  SessionLimits limits;
  constexpr std::size_t kCount = 3 * kSessionStep;
  SessionManager probe(&clock, limits, nullptr);
  ASSERT_NE(probe.GetOrCreate("one"), nullptr);
  const std::size_t per_session = probe.bytes();  // an empty session's bytes
  ASSERT_GT(per_session, 0u);
  limits.max_bytes = per_session * (kSessionStep / 2);  // keeps half a step of sessions
  SessionManager sessions(&clock, limits, nullptr);
  for (std::size_t i = 0; i < kCount; ++i)
    ASSERT_NE(sessions.GetOrCreate("s-" + std::to_string(i)), nullptr);
  EXPECT_EQ(sessions.Trim(), kCount - kSessionStep / 2);
  EXPECT_EQ(sessions.size(), kSessionStep / 2);
  EXPECT_LE(sessions.bytes(), limits.max_bytes);
  EXPECT_NE(sessions.Find("s-" + std::to_string(kCount - 1)), nullptr);  // the newest stay
}

}  // namespace
}  // namespace lmcache::worker
