// PeerDirectory: the peers a miss should ask. A peer's stored chunks name
// it; its removals and clear stop naming it; a new incarnation forgets the
// old process's chunks; a gap makes it stale (named for every chunk) until
// a resync; a forgotten peer is never named; prefixes come longest first;
// of a chunk's holders exactly one keeps it (the last-copy bias).
#include "fleet/peer_directory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "fleet/chunk_log.h"
#include "fleet/last_copy_bias.h"

namespace lmcache::fleet {
namespace {

std::vector<ChunkId> Prompt(std::uint64_t first, std::size_t n) {
  std::vector<ChunkId> chunks;
  std::mt19937_64 random(first);
  for (std::size_t i = 0; i < n; ++i) chunks.push_back(random());
  return chunks;
}

TEST(PeerDirectory, ChunkIdsDifferByModelAndHash) {
  store::ChunkHash a{};
  store::ChunkHash b{};
  b[0] = 1;
  EXPECT_NE(PeerDirectory::ChunkIdOf("m", a), PeerDirectory::ChunkIdOf("m", b));
  EXPECT_NE(PeerDirectory::ChunkIdOf("m", a), PeerDirectory::ChunkIdOf("n", a));
  EXPECT_EQ(PeerDirectory::ChunkIdOf("m", b), PeerDirectory::ChunkIdOf("m", b));
}

TEST(PeerDirectory, ANewPeerIsStaleUntilItsFeedIsInStep) {
  PeerDirectory directory;
  directory.AddPeer(7, 1000);
  const auto chunks = Prompt(1, 4);
  EXPECT_EQ(directory.MayHold(chunks[0]), std::vector<PeerId>{7}) << "stale: asked for anything";
  // Joined mid-stream (seq 40 of its process): a gap from seq 1, still stale.
  EXPECT_EQ(directory.Apply(7, 100, 40, DirectoryChange::kStored, chunks), Applied::kGap);
  EXPECT_EQ(directory.Apply(7, 100, 41, DirectoryChange::kStored, chunks), Applied::kStale);
  EXPECT_EQ(directory.Stats().stale_peers, 1u);
  // Resync: emptied, replayed, trusted from 41.
  directory.Empty(7);
  directory.Replay(7, DirectoryChange::kStored, std::span(chunks).first(2));
  directory.Resynced(7, 100, 41);
  EXPECT_EQ(directory.Stats().stale_peers, 0u);
  EXPECT_EQ(directory.MayHold(chunks[1]), std::vector<PeerId>{7});
  EXPECT_TRUE(directory.MayHold(chunks[2]).empty());
  EXPECT_EQ(directory.Apply(7, 100, 42, DirectoryChange::kStored, std::span(chunks).subspan(2)),
            Applied::kApplied);
  EXPECT_EQ(directory.MayHold(chunks[3]), std::vector<PeerId>{7});
}

TEST(PeerDirectory, EventsInStepNameWhatEachPeerHolds) {
  PeerDirectory directory;
  for (PeerId p : {1, 2, 3}) directory.AddPeer(p, 1000);
  const auto prompt = Prompt(2, 6);
  // A process's first event is seq 1: in step from there.
  ASSERT_EQ(directory.Apply(1, 11, 1, DirectoryChange::kStored, prompt), Applied::kApplied);
  ASSERT_EQ(directory.Apply(2, 22, 1, DirectoryChange::kStored, std::span(prompt).first(3)),
            Applied::kApplied);
  ASSERT_EQ(directory.Apply(3, 33, 1, DirectoryChange::kStored, Prompt(3, 2)), Applied::kApplied);
  EXPECT_EQ(directory.MayHold(prompt[0]), (std::vector<PeerId>{1, 2}));
  EXPECT_EQ(directory.MayHold(prompt[5]), (std::vector<PeerId>{1}));
  const auto prefixes = directory.Prefixes(prompt);
  ASSERT_EQ(prefixes.size(), 2u);
  EXPECT_EQ(prefixes[0].peer, 1u);
  EXPECT_EQ(prefixes[0].chunks, 6u);
  EXPECT_EQ(prefixes[1].peer, 2u);
  EXPECT_EQ(prefixes[1].chunks, 3u);

  // Peer 1 evicts chunk 2: its run ends there.
  ASSERT_EQ(directory.Apply(1, 11, 2, DirectoryChange::kRemoved, std::span(prompt).subspan(2, 1)),
            Applied::kApplied);
  EXPECT_EQ(directory.Prefixes(prompt)[0].chunks, 3u);
  // Peer 2 clears: never named again for these.
  ASSERT_EQ(directory.Apply(2, 22, 2, DirectoryChange::kCleared, {}), Applied::kApplied);
  EXPECT_EQ(directory.MayHold(prompt[0]), (std::vector<PeerId>{1}));
  EXPECT_EQ(directory.Stats().applied_events, 5u);
}

TEST(PeerDirectory, AGapMakesAPeerStaleAndANewIncarnationStartsItOver) {
  PeerDirectory directory;
  directory.AddPeer(4, 1000);
  const auto prompt = Prompt(4, 3);
  ASSERT_EQ(directory.Apply(4, 5, 1, DirectoryChange::kStored, prompt), Applied::kApplied);
  // Seq 2 lost: 3 is a gap; the peer is named for any chunk until resynced.
  EXPECT_EQ(directory.Apply(4, 5, 3, DirectoryChange::kRemoved, prompt), Applied::kGap);
  EXPECT_EQ(directory.MayHold(Prompt(99, 1)[0]), std::vector<PeerId>{4});
  EXPECT_EQ(directory.Apply(4, 5, 4, DirectoryChange::kStored, prompt), Applied::kStale);
  const auto stale = directory.Prefixes(prompt);
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_TRUE(stale[0].stale);
  EXPECT_EQ(stale[0].chunks, 3u);
  // The peer restarted: its old chunks are gone, its events count from 1.
  EXPECT_EQ(directory.Apply(4, 6, 1, DirectoryChange::kStored, std::span(prompt).first(1)),
            Applied::kNewIncarnation);
  EXPECT_EQ(directory.MayHold(prompt[0]), std::vector<PeerId>{4});
  EXPECT_TRUE(directory.MayHold(prompt[1]).empty());
  const auto s = directory.Stats();
  EXPECT_EQ(s.gaps, 1u);
  EXPECT_EQ(s.incarnations, 1u);
  EXPECT_EQ(s.stale_peers, 0u);
}

TEST(PeerDirectory, AForgottenPeerIsNeverNamedAndItsMemoryGoes) {
  PeerDirectory directory;
  directory.AddPeer(1, 100'000);
  directory.AddPeer(2, 100'000);
  const auto prompt = Prompt(5, 10);
  for (PeerId p : {1, 2}) directory.Apply(p, 1, 1, DirectoryChange::kStored, prompt);
  const std::uint64_t both = directory.Stats().memory_bytes;
  directory.ForgetPeer(1);
  EXPECT_EQ(directory.MayHold(prompt[0]), std::vector<PeerId>{2});
  EXPECT_EQ(directory.Apply(1, 1, 2, DirectoryChange::kStored, prompt), Applied::kUnknownPeer);
  EXPECT_EQ(directory.Stats().memory_bytes, both / 2);
  EXPECT_EQ(directory.Stats().peers, 1u);
}

TEST(PeerDirectory, AFullFilterMakesThePeerStaleUntilResizedAndResynced) {
  PeerDirectory directory;
  directory.AddPeer(9, 4);  // room for a handful
  const auto many = Prompt(6, 64);
  ASSERT_EQ(directory.Apply(9, 1, 1, DirectoryChange::kStored, many), Applied::kFull);
  EXPECT_GT(directory.Stats().full_inserts, 0u);
  EXPECT_EQ(directory.Stats().stale_peers, 1u) << "incomplete: named for every chunk";
  directory.Resize(9, 1000);
  EXPECT_EQ(directory.Replay(9, DirectoryChange::kStored, many), 0u);
  directory.Resynced(9, 1, 1);
  EXPECT_EQ(directory.Stats().stale_peers, 0u);
  for (const auto chunk : many) EXPECT_EQ(directory.MayHold(chunk), std::vector<PeerId>{9});
  EXPECT_EQ(directory.Apply(9, 1, 2, DirectoryChange::kRemoved, std::span(many).first(1)),
            Applied::kApplied);
  EXPECT_TRUE(directory.MayHold(many[0]).empty());
}

// Feeds of several peers and lookups at once while peers come and go (TSan
// runs this).
TEST(PeerDirectory, FeedsLookupsAndChurnRunTogether) {
  PeerDirectory directory;
  constexpr int kPeers = 4;
  for (PeerId p = 1; p <= kPeers; ++p) directory.AddPeer(p, 50'000);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (PeerId p = 1; p <= kPeers; ++p) {
    threads.emplace_back([&directory, p] {
      std::uint64_t seq = 0;
      for (int batch = 0; batch < 200; ++batch) {
        const auto chunks = Prompt(p * 1000 + static_cast<std::uint64_t>(batch), 16);
        directory.Apply(p, 1, ++seq, DirectoryChange::kStored, chunks);
        if (batch % 3 == 0) directory.Apply(p, 1, ++seq, DirectoryChange::kRemoved, chunks);
      }
    });
  }
  threads.emplace_back([&] {
    const auto prompt = Prompt(1000, 16);
    while (!stop.load()) {
      for (const auto& prefix : directory.Prefixes(prompt)) ASSERT_LE(prefix.chunks, 16u);
      ASSERT_EQ(directory.KeptElsewhere(prompt, 99).size(), 16u);
    }
  });
  for (int i = 0; i < 50; ++i) {
    directory.ForgetPeer(kPeers + 1);
    directory.AddPeer(kPeers + 1, 1000);
  }
  for (std::size_t t = 0; t < kPeers; ++t) threads[t].join();
  stop = true;
  threads.back().join();
  const auto s = directory.Stats();
  EXPECT_EQ(s.gaps, 0u);
  EXPECT_EQ(s.applied_events, kPeers * (200u + 67u));
  // Peer 1's first prompt was stored (batch 0) then removed.
  EXPECT_EQ(directory.Prefixes(Prompt(1000, 16)).size(), 1u) << "only the churned, stale peer";
}

// ---- the fleet's last copy evicted last (issue 43, section 3) ----

// Two nodes holding the same chunks, each knowing the other through its
// directory: for every chunk exactly one of them takes its copy for the
// spare one, and the keepers split the chunks about evenly.
TEST(PeerDirectory, OfTwoHoldersExactlyOneKeepsEachChunk) {
  constexpr std::uint64_t kLifeA = 0x1111, kLifeB = 0x2222;
  const auto chunks = Prompt(5, 1000);
  PeerDirectory at_a;  // A's view: B holds the chunks
  at_a.AddPeer(2, 4000);
  ASSERT_EQ(at_a.Apply(2, kLifeB, 1, DirectoryChange::kStored, chunks), Applied::kApplied);
  PeerDirectory at_b;
  at_b.AddPeer(1, 4000);
  ASSERT_EQ(at_b.Apply(1, kLifeA, 1, DirectoryChange::kStored, chunks), Applied::kApplied);
  const std::vector<bool> a_spare = at_a.KeptElsewhere(chunks, kLifeA);
  const std::vector<bool> b_spare = at_b.KeptElsewhere(chunks, kLifeB);
  std::size_t a_count = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_NE(a_spare[i], b_spare[i]) << i;
    a_count += a_spare[i] ? 1 : 0;
  }
  EXPECT_GT(a_count, 400u);
  EXPECT_LT(a_count, 600u);
}

TEST(PeerDirectory, OfThreeHoldersTwoTakeTheirCopyForTheSpareOne) {
  const std::vector<std::uint64_t> lives = {0xa, 0xb, 0xc};
  const auto chunks = Prompt(6, 200);
  std::vector<std::size_t> spare_views(chunks.size(), 0);
  for (std::size_t self = 0; self < lives.size(); ++self) {
    PeerDirectory directory;
    std::uint64_t peer = 0;
    for (std::size_t other = 0; other < lives.size(); ++other) {
      if (other == self) continue;
      directory.AddPeer(++peer, 1000);
      ASSERT_EQ(directory.Apply(peer, lives[other], 1, DirectoryChange::kStored, chunks),
                Applied::kApplied);
    }
    const auto spare = directory.KeptElsewhere(chunks, lives[self]);
    for (std::size_t i = 0; i < chunks.size(); ++i) spare_views[i] += spare[i] ? 1 : 0;
  }
  for (std::size_t i = 0; i < chunks.size(); ++i) EXPECT_EQ(spare_views[i], 2u) << i;
}

// Only what a peer in step holds counts: a stale peer (whose filter is not
// trusted), a removed chunk, a forgotten peer and an unknown chunk keep
// nothing, so the bias falls back to plain LRU.
TEST(PeerDirectory, OnlyAPeerInStepHoldingTheChunkKeepsIt) {
  const auto chunks = Prompt(7, 64);
  PeerDirectory directory;
  directory.AddPeer(3, 1000);
  // Ranked for this test: of the chunks, those peer 3 would keep over us.
  ASSERT_EQ(directory.Apply(3, 77, 1, DirectoryChange::kStored, chunks), Applied::kApplied);
  const std::vector<bool> kept = directory.KeptElsewhere(chunks, 1);
  const auto kept_count = std::count(kept.begin(), kept.end(), true);
  ASSERT_GT(kept_count, 0);
  ASSERT_LT(kept_count, 64);
  EXPECT_EQ(directory.KeptElsewhere(Prompt(8, 64), 1), std::vector<bool>(64, false))
      << "chunks nobody holds";
  // Removed: no longer kept there.
  ASSERT_EQ(directory.Apply(3, 77, 2, DirectoryChange::kRemoved, std::span(chunks).first(32)),
            Applied::kApplied);
  const std::vector<bool> after = directory.KeptElsewhere(chunks, 1);
  for (std::size_t i = 0; i < 32; ++i) EXPECT_FALSE(after[i]) << i;
  for (std::size_t i = 32; i < 64; ++i) EXPECT_EQ(after[i], kept[i]) << i;
  // Stale (a gap): its filter is kept but not trusted.
  ASSERT_EQ(directory.Apply(3, 77, 9, DirectoryChange::kStored, chunks), Applied::kGap);
  EXPECT_EQ(directory.KeptElsewhere(chunks, 1), std::vector<bool>(64, false));
  directory.Resynced(3, 77, 9);
  EXPECT_EQ(directory.KeptElsewhere(chunks, 1), after);
  directory.ForgetPeer(3);
  EXPECT_EQ(directory.KeptElsewhere(chunks, 1), std::vector<bool>(64, false));
}

// What the evictor asks: object keys, through their chunk ids.
TEST(LastCopyBias, AnObjectIsExpendableWhenItsChunksKeeperIsAPeer) {
  std::vector<store::ObjectKey> keys;
  for (std::uint8_t n = 0; n < 32; ++n) {
    store::ObjectKey key;
    key.model_name = "m";
    key.chunk_hash[0] = n;
    key.chunk_hash[1] = 0x5a;
    keys.push_back(key);
  }
  const std::vector<ChunkId> ids = ChunkIdsOf(keys);
  PeerDirectory directory;
  directory.AddPeer(4, 1000);
  // The peer holds the first half.
  ASSERT_EQ(directory.Apply(4, 0xbeef, 1, DirectoryChange::kStored, std::span(ids).first(16)),
            Applied::kApplied);
  const LastCopyBias bias(&directory, 0xcafe);
  const std::vector<bool> expendable = bias.Expendable(keys);
  const std::vector<bool> kept = directory.KeptElsewhere(ids, 0xcafe);
  ASSERT_EQ(expendable.size(), keys.size());
  std::size_t count = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(expendable[i], kept[i]) << i;
    if (i >= 16) {
      EXPECT_FALSE(expendable[i]) << i;
    }
    count += expendable[i] ? 1 : 0;
  }
  EXPECT_GT(count, 0u) << "some of the 16 held are the peer's to keep";
  EXPECT_LT(count, 16u) << "and some are ours";
}

}  // namespace
}  // namespace lmcache::fleet
