// DirectoryFeed: a ready peer is listed, caught up and followed; what it
// stores and drops reaches the directory; a gap, a new life, a full filter
// or a malformed answer lists it again, and the directory is right after;
// a peer that stops being ready is forgotten and listed again when back; a
// call that fails is retried later, the peer stale (asked for everything)
// meanwhile. The peers are fakes that serve a real ChunkLog and a listing
// of what they hold, through the real codec.
#include "fleet/directory_feed.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/msgpack_cursor.h"
#include "fakes/fake_clock.h"
#include "fakes/keys.h"
#include "protocol/wire_codec.h"

namespace lmcache::fleet {
namespace {

using testing::KeyN;

ChunkId Id(std::uint64_t n) {
  const store::ObjectKey key = KeyN(n);
  return PeerDirectory::ChunkIdOf(key.model_name, key.chunk_hash);
}

// One fake peer: its L1 (chunk numbers) and its chunk log.
struct FakePeer {
  explicit FakePeer(std::uint64_t incarnation, std::size_t log_chunks = 1u << 20)
      : log(std::make_unique<ChunkLog>(ChunkLogConfig{log_chunks}, incarnation)) {}
  std::set<std::uint64_t> held;
  std::unique_ptr<ChunkLog> log;
  std::uint64_t capacity = 0;  // what its listing says L1 may hold
  bool silent = false;
  bool garbled = false;
};

class FakePeers final : public PeerAccess {
 public:
  FakePeer& Add(PeerId id, std::uint64_t incarnation = 100, std::size_t log_chunks = 1u << 20) {
    std::lock_guard lock(mu_);
    auto [it, added] =
        peers_.insert_or_assign(id, std::make_shared<FakePeer>(incarnation, log_chunks));
    ready_.insert(id);
    return *it->second;
  }
  void Store(PeerId id, std::uint64_t first, std::uint64_t count) {
    FakePeer& peer = *Find(id);
    std::vector<store::ObjectKey> keys;
    for (std::uint64_t n = first; n < first + count; ++n) {
      keys.push_back(KeyN(n));
      peer.held.insert(n);
    }
    peer.log->OnAdmitted(keys, std::vector<std::uint64_t>(keys.size(), 1),
                         store::AdmissionSource::kWriter);
  }
  void Drop(PeerId id, std::uint64_t n) {
    FakePeer& peer = *Find(id);
    peer.held.erase(n);
    const store::ObjectKey key = KeyN(n);
    peer.log->OnEvicted({&key, 1}, std::vector<std::uint64_t>{1});
  }
  void SetReady(PeerId id, bool ready) {
    std::lock_guard lock(mu_);
    if (ready) {
      ready_.insert(id);
    } else {
      ready_.erase(id);
    }
  }
  std::shared_ptr<FakePeer> Find(PeerId id) {
    std::lock_guard lock(mu_);
    return peers_.at(id);
  }
  int calls() const { return calls_; }

  std::vector<ReadyPeer> Ready() const override {
    std::lock_guard lock(mu_);
    std::vector<ReadyPeer> ready;
    for (PeerId id : ready_) ready.push_back({"tcp://peer" + std::to_string(id), id, id, "boot"});
    return ready;
  }
  void Call(PeerId id, Op op, std::vector<std::string> payloads, TimeMs,
            PeerRpc::Done done) const override {
    const std::shared_ptr<FakePeer> peer = const_cast<FakePeers*>(this)->Find(id);
    const_cast<FakePeers*>(this)->calls_ += 1;
    if (peer->silent) return done(Status(ErrorCode::kTimeout, "no answer by the deadline"));
    if (peer->garbled) return done(std::string("\x93\x01\x02", 3));
    if (op == Op::kP2pChunkEvents) {
      const auto cursor = protocol::DecodeInt(payloads.at(0), "cursor");
      const auto max = protocol::DecodeInt(payloads.at(1), "max");
      return done(EncodeChunkPage(peer->log->ReadAfter(static_cast<std::uint64_t>(*cursor),
                                                       static_cast<std::size_t>(*max), 1u << 20)));
    }
    // A listing: `after` is the last chunk number listed, in decimal; pages of `limit`.
    const auto after = protocol::DecodeBytes(payloads.at(0), "after");
    const auto limit = protocol::DecodeInt(payloads.at(1), "limit");
    ChunkListing listing;
    listing.incarnation = peer->log->incarnation();
    listing.log_cursor = peer->log->last_seq();
    listing.capacity_chunks = peer->capacity;
    auto it = after->empty() ? peer->held.begin() : peer->held.upper_bound(std::stoull(*after));
    for (; it != peer->held.end() && static_cast<std::int64_t>(listing.chunks.size()) < *limit;
         ++it) {
      listing.chunks.push_back(Id(*it));
    }
    if (it != peer->held.end()) listing.next = std::to_string(*std::prev(it));
    done(EncodeChunkListing(listing));
  }
  void Read(PeerHandle, std::vector<UcxRead>, TimeMs, UcxChannel::ReadsDone done) const override {
    done(Status(ErrorCode::kNotSupported, "no reads here"), {});
  }
  const Clock& clock() const override { return clock_; }
  TimeMs lookup_timeout_ms() const override { return 1000; }
  TimeMs load_timeout_ms() const override { return 1000; }

  testing::FakeClock clock_;

 private:
  mutable std::mutex mu_;
  std::map<PeerId, std::shared_ptr<FakePeer>> peers_;
  std::set<PeerId> ready_;
  mutable int calls_ = 0;
};

class DirectoryFeedTest : public ::testing::Test {
 protected:
  DirectoryFeedTest() : feed_(Config(), &peers_, &directory_) {}
  static DirectoryFeedConfig Config() {
    DirectoryFeedConfig config;
    config.poll_interval_ms = 100;
    config.retry_ms = 1000;
    config.page_records = 4;
    config.listing_chunks = 16;
    config.min_capacity_chunks = 64;
    return config;
  }
  // A tick after the poll interval (and the retry delay) passed.
  void Poll() {
    peers_.clock_.Advance(1000);
    feed_.Tick();
  }
  bool Named(std::uint64_t n, PeerId peer) {
    for (PeerId p : directory_.MayHold(Id(n))) {
      if (p == peer) return true;
    }
    return false;
  }
  bool InStep(PeerId peer) {
    for (PeerId p : directory_.InStepPeers()) {
      if (p == peer) return true;
    }
    return false;
  }

  FakePeers peers_;
  PeerDirectory directory_;
  DirectoryFeed feed_;
};

TEST_F(DirectoryFeedTest, APeerIsListedThenFollowedAndItsStoresAndDropsReachTheDirectory) {
  peers_.Add(1);
  peers_.Store(1, 0, 40);  // before we meet it: only a listing tells
  peers_.Drop(1, 5);
  feed_.Tick();  // listed (3 pages), caught up, in step: all within the one tick
  ASSERT_TRUE(InStep(1));
  EXPECT_TRUE(Named(0, 1) && Named(39, 1));
  EXPECT_FALSE(Named(5, 1));
  EXPECT_FALSE(Named(1000, 1));
  P2pDirectoryStats stats = feed_.Stats();
  EXPECT_EQ(stats.listed_chunks, 39u);
  EXPECT_EQ(stats.resyncs, 1u);
  EXPECT_EQ(stats.stale_peers, 0u);

  // Ten records: more than a page of 4, read in one pass.
  for (std::uint64_t i = 0; i < 10; ++i) peers_.Store(1, 100 + i, 1);
  peers_.Drop(1, 0);
  Poll();
  EXPECT_TRUE(Named(100, 1) && Named(109, 1));
  EXPECT_FALSE(Named(0, 1));
  stats = feed_.Stats();
  EXPECT_EQ(stats.applied_events, 11u);
  EXPECT_EQ(stats.gaps, 0u);
  EXPECT_GT(stats.feed_bytes, 0u);
  EXPECT_EQ(stats.chunks, 48u);

  // Not due yet: no call.
  const int calls = peers_.calls();
  feed_.Tick();
  EXPECT_EQ(peers_.calls(), calls);
}

TEST_F(DirectoryFeedTest, WhatChangesDuringTheListingIsCaughtUpAfterIt) {
  peers_.Add(1);
  peers_.Store(1, 0, 8);
  FakePeer& peer = *peers_.Find(1);
  peer.silent = true;
  feed_.Tick();  // the listing's first call fails: retried later, stale meanwhile
  EXPECT_FALSE(InStep(1));
  EXPECT_TRUE(Named(12345, 1)) << "a stale peer is named for everything";
  EXPECT_EQ(feed_.Stats().poll_failures, 1u);
  peer.silent = false;
  peers_.Store(1, 8, 2);
  peers_.Drop(1, 0);
  Poll();
  ASSERT_TRUE(InStep(1));
  EXPECT_TRUE(Named(9, 1));
  EXPECT_FALSE(Named(0, 1));
}

TEST_F(DirectoryFeedTest, AGapANewLifeOrAMalformedAnswerListsThePeerAgain) {
  peers_.Add(1, 100, /*log_chunks=*/8);
  peers_.Store(1, 0, 4);
  feed_.Tick();
  ASSERT_TRUE(InStep(1));
  // Its log drops records we had not read (a bound of 8 chunks).
  for (std::uint64_t i = 0; i < 6; ++i) peers_.Store(1, 10 + 4 * i, 4);
  peers_.Drop(1, 1);
  Poll();  // the gap: stale, listed again a retry later (never in a tight loop)
  EXPECT_FALSE(InStep(1));
  EXPECT_TRUE(Named(777, 1)) << "stale: named for everything";
  Poll();
  EXPECT_TRUE(InStep(1));
  EXPECT_GE(feed_.Stats().gaps, 1u);
  EXPECT_EQ(feed_.Stats().resyncs, 2u);
  EXPECT_TRUE(Named(10, 1) && Named(33, 1));
  EXPECT_FALSE(Named(1, 1));

  // A new life (a restart), holding other chunks: the old ones are gone.
  FakePeer& reborn = peers_.Add(1, 200);
  reborn.held = {500, 501};
  Poll();
  Poll();
  EXPECT_TRUE(InStep(1));
  EXPECT_TRUE(Named(500, 1));
  EXPECT_FALSE(Named(10, 1));
  EXPECT_EQ(feed_.Stats().incarnations, 1u);

  // Garbage: not trusted; listed again once it answers properly.
  peers_.Find(1)->garbled = true;
  Poll();
  EXPECT_FALSE(InStep(1));
  peers_.Find(1)->garbled = false;
  Poll();
  EXPECT_TRUE(InStep(1));
  EXPECT_TRUE(Named(501, 1));
}

TEST_F(DirectoryFeedTest, APeerThatStopsBeingReadyIsForgottenAndListedAgainWhenBack) {
  peers_.Add(1);
  peers_.Add(2);
  peers_.Store(1, 0, 4);
  peers_.Store(2, 10, 4);
  feed_.Tick();
  ASSERT_TRUE(InStep(1) && InStep(2));
  peers_.SetReady(1, false);
  Poll();
  EXPECT_EQ(directory_.Stats().peers, 1u);
  EXPECT_FALSE(Named(0, 1));
  EXPECT_EQ(feed_.Stats().forgotten_peers, 1u);
  peers_.Store(1, 4, 1);
  peers_.SetReady(1, true);
  Poll();
  EXPECT_TRUE(InStep(1));
  EXPECT_TRUE(Named(0, 1) && Named(4, 1));
  EXPECT_TRUE(Named(10, 2));
}

TEST_F(DirectoryFeedTest, AFullFilterIsListedAgainIntoOneTwiceTheSize) {
  peers_.Add(1);  // says nothing of its capacity: the feed starts at 64 chunks
  peers_.Store(1, 0, 50);
  feed_.Tick();
  ASSERT_TRUE(InStep(1));
  peers_.Store(1, 50, 200);  // past 64 chunks' filter
  for (int i = 0; i < 6 && !(InStep(1) && Named(249, 1)); ++i) Poll();
  EXPECT_TRUE(InStep(1));
  for (std::uint64_t n : {0, 63, 64, 200, 249}) EXPECT_TRUE(Named(n, 1)) << n;
  const P2pDirectoryStats stats = feed_.Stats();
  EXPECT_GT(stats.full_inserts, 0u);
  EXPECT_GE(stats.resyncs, 2u);
  EXPECT_GE(stats.chunks, 250u);
}

TEST_F(DirectoryFeedTest, APeerInStepWhoseCallsKeepFailingGoesStale) {
  peers_.Add(1);
  peers_.Store(1, 0, 4);
  feed_.Tick();
  ASSERT_TRUE(InStep(1));
  peers_.Find(1)->silent = true;
  Poll();
  Poll();
  EXPECT_TRUE(InStep(1)) << "two failures: asked again where it was";
  Poll();
  EXPECT_FALSE(InStep(1)) << "the third in a row: not trusted until listed again";
  peers_.Find(1)->silent = false;
  peers_.Store(1, 4, 1);
  Poll();
  EXPECT_TRUE(InStep(1));
  EXPECT_TRUE(Named(4, 1));
}

TEST_F(DirectoryFeedTest, APeersOwnEstimateOfItsCapacityIsBounded) {
  FakePeer& peer = peers_.Add(1);
  peer.capacity = 1ull << 40;  // untrusted: would be terabytes of filter
  peers_.Store(1, 0, 4);
  feed_.Tick();
  ASSERT_TRUE(InStep(1));
  EXPECT_LE(feed_.Stats().memory_bytes, (1u << 24) * 3u);
}

TEST_F(DirectoryFeedTest, AfterStopNothingIsCalledOrChanged) {
  peers_.Add(1);
  feed_.Stop();
  feed_.Tick();
  EXPECT_EQ(peers_.calls(), 0);
  EXPECT_EQ(directory_.Stats().peers, 0u);
}

}  // namespace
}  // namespace lmcache::fleet
