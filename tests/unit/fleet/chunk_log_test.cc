// ChunkLog: what L1 gained and lost, as numbered records of distinct chunk
// ids; a callback past the record bound is split; the log keeps its bound
// in chunks, and a reader behind it (or ahead of it: a previous life's
// cursor) is told it lost records; pages stop at their bounds.
#include "fleet/chunk_log.h"

#include <gtest/gtest.h>

#include <vector>

#include "fakes/keys.h"

namespace lmcache::fleet {
namespace {

using testing::KeyN;
using testing::KeysN;

ChunkId Id(std::uint64_t n) {
  const store::ObjectKey key = KeyN(n);
  return PeerDirectory::ChunkIdOf(key.model_name, key.chunk_hash);
}

std::vector<std::uint64_t> Bytes(std::size_t n) { return std::vector<std::uint64_t>(n, 4096); }

TEST(ChunkLog, AChunkIsStoredWithItsFirstObjectAndRemovedWithItsLast) {
  ChunkLog log({}, 77);
  // Two ranks of chunk 0 and one of chunk 1: two chunks stored.
  const std::vector<store::ObjectKey> admitted = {KeyN(0, "m", 0), KeyN(0, "m", 1), KeyN(1)};
  log.OnAdmitted(admitted, Bytes(3), store::AdmissionSource::kWriter);
  log.OnEvicted(KeysN(0, 1), Bytes(1));  // rank 0 of chunk 0: rank 1 stays, nothing to say
  log.OnDeleted(KeysN(1, 1), Bytes(1));  // chunk 1's only object
  const store::ObjectKey rank1 = KeyN(0, "m", 1);
  log.OnEvicted({&rank1, 1}, Bytes(1));                     // chunk 0's last object
  log.OnAdmitted({}, {}, store::AdmissionSource::kWriter);  // nothing: no record
  EXPECT_EQ(log.last_seq(), 3u);

  const ChunkPage all = log.ReadAfter(0, 100, 1000);
  EXPECT_EQ(all.incarnation, 77u);
  EXPECT_FALSE(all.lost);
  EXPECT_EQ(all.next_cursor, 3u);
  ASSERT_EQ(all.records.size(), 3u);
  EXPECT_EQ(all.records[0], (ChunkRecord{1, DirectoryChange::kStored, {Id(0), Id(1)}}));
  EXPECT_EQ(all.records[1], (ChunkRecord{2, DirectoryChange::kRemoved, {Id(1)}}));
  EXPECT_EQ(all.records[2], (ChunkRecord{3, DirectoryChange::kRemoved, {Id(0)}}));

  const ChunkPage rest = log.ReadAfter(1, 100, 1000);
  ASSERT_EQ(rest.records.size(), 2u);
  EXPECT_EQ(rest.records[0].seq, 2u);
  const ChunkPage none = log.ReadAfter(3, 100, 1000);
  EXPECT_TRUE(none.records.empty());
  EXPECT_FALSE(none.lost);
  EXPECT_EQ(none.next_cursor, 3u);
}

// Two tenants' equal chunks are two chunks (a peer's hint names the
// tenant's own); a chunk's ranks are one.
TEST(ChunkLog, AChunkIdFoldsInTheTenantButNotTheRank) {
  store::ObjectKey plain = KeyN(3);
  store::ObjectKey salted = KeyN(3);
  salted.cache_salt = "tenant-a";
  store::ObjectKey other = KeyN(3);
  other.cache_salt = "tenant-b";
  const store::ObjectKey rank1 = KeyN(3, "m", 1);
  const std::vector<store::ObjectKey> keys = {plain, salted, other, rank1, salted};
  const std::vector<ChunkId> ids = ChunkIdsOf(keys);
  EXPECT_EQ(ids[0], Id(3)) << "no salt: ChunkIdOf(model, hash)";
  EXPECT_NE(ids[1], ids[0]);
  EXPECT_NE(ids[2], ids[1]);
  EXPECT_EQ(ids[3], ids[0]) << "the ranks of a chunk share its id";
  EXPECT_EQ(ids[4], ids[1]);
  EXPECT_EQ(ids[1], PeerDirectory::ChunkIdOf(PeerDirectory::ModelSeed("m", "tenant-a"),
                                             salted.chunk_hash));
  // The salt is not a suffix of the model name.
  EXPECT_NE(PeerDirectory::ModelSeed("mt", ""), PeerDirectory::ModelSeed("m", "t"));
}

TEST(ChunkLog, CallbacksOutOfOrderOrObjectsSeededBeforeListeningKeepTheChunkRight) {
  ChunkLog log({}, 1);
  // Evicted, then admitted again; the admission's callback comes first.
  log.OnAdmitted(KeysN(0, 1), Bytes(1), store::AdmissionSource::kWriter);  // seq 1: stored
  log.OnAdmitted(KeysN(0, 1), Bytes(1), store::AdmissionSource::kTier);    // the re-admission
  log.OnEvicted(KeysN(0, 1), Bytes(1));                                    // the eviction
  EXPECT_EQ(log.last_seq(), 1u) << "still held: nothing to announce";
  // Adopted at a warm restart (seeded, not logged): its removal is announced.
  log.Seed(KeysN(5, 1));
  EXPECT_EQ(log.last_seq(), 1u);
  log.OnDeleted(KeysN(5, 1), Bytes(1));
  const ChunkPage page = log.ReadAfter(1, 10, 100);
  ASSERT_EQ(page.records.size(), 1u);
  EXPECT_EQ(page.records[0], (ChunkRecord{2, DirectoryChange::kRemoved, {Id(5)}}));
}

TEST(ChunkLog, ACallbackPastTheRecordBoundIsSplitIntoConsecutiveRecords) {
  ChunkLog log({}, 1);
  log.OnAdmitted(KeysN(0, ChunkLog::kMaxRecordChunks + 10), Bytes(ChunkLog::kMaxRecordChunks + 10),
                 store::AdmissionSource::kWriter);
  const ChunkPage page = log.ReadAfter(0, 100, 1u << 20);
  ASSERT_EQ(page.records.size(), 2u);
  EXPECT_EQ(page.records[0].chunks.size(), ChunkLog::kMaxRecordChunks);
  EXPECT_EQ(page.records[1].chunks.size(), 10u);
  EXPECT_EQ(page.records[1].seq, 2u);
  EXPECT_EQ(page.records[1].chunks.back(), Id(ChunkLog::kMaxRecordChunks + 9));
}

TEST(ChunkLog, TheLogKeepsItsBoundAndAReaderBehindOrAheadOfItIsToldItLost) {
  ChunkLog log({.max_chunks = 8}, 5);
  for (std::uint64_t i = 0; i < 4; ++i) {
    log.OnAdmitted(KeysN(4 * i, 4), Bytes(4), store::AdmissionSource::kWriter);
  }
  const ChunkLogStats stats = log.Stats();
  EXPECT_EQ(stats.last_seq, 4u);
  EXPECT_EQ(stats.records, 2u);
  EXPECT_EQ(stats.chunks, 8u);
  EXPECT_EQ(stats.dropped_records, 2u);

  const ChunkPage behind = log.ReadAfter(1, 100, 1000);  // record 2 is gone
  EXPECT_TRUE(behind.lost);
  const ChunkPage in_step = log.ReadAfter(2, 100, 1000);
  EXPECT_FALSE(in_step.lost);
  ASSERT_EQ(in_step.records.size(), 2u);
  EXPECT_EQ(in_step.records[0].seq, 3u);
  const ChunkPage ahead = log.ReadAfter(9, 100, 1000);  // a previous life's cursor
  EXPECT_TRUE(ahead.lost);
  EXPECT_TRUE(ahead.records.empty());
  EXPECT_EQ(ahead.next_cursor, 4u);
}

TEST(ChunkLog, APageStopsAtItsRecordsOrChunksButTakesAtLeastOneRecord) {
  ChunkLog log({}, 1);
  for (std::uint64_t i = 0; i < 5; ++i) {
    log.OnAdmitted(KeysN(10 * i, 3), Bytes(3), store::AdmissionSource::kWriter);
  }
  EXPECT_EQ(log.ReadAfter(0, 2, 1000).records.size(), 2u);
  EXPECT_EQ(log.ReadAfter(0, 100, 7).records.size(), 2u);  // 3 + 3, a third would pass 7
  const ChunkPage one = log.ReadAfter(0, 100, 1);          // one record even past the bound
  ASSERT_EQ(one.records.size(), 1u);
  EXPECT_EQ(one.next_cursor, 1u);
}

}  // namespace
}  // namespace lmcache::fleet
