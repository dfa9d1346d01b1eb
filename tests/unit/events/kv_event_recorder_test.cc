// KvEventRecorder: admissions, evictions, deletions and L2 writes become the
// reference's records (one stored record per chunk, its KV ranks collapsed,
// with the tokens its store bound; one removed record per model and
// tenant), and a tenant is named without its salt.
#include "events/kv_event_recorder.h"

#include <gtest/gtest.h>

namespace lmcache::events {
namespace {

std::vector<std::uint32_t> ToVector(std::span<const std::uint32_t> tokens) {
  return {tokens.begin(), tokens.end()};
}

store::ObjectKey Key(std::uint8_t chunk, std::int64_t rank, const std::string& salt = "",
                     const std::string& model = "m") {
  store::ObjectKey key;
  key.chunk_hash[0] = chunk;
  key.model_name = model;
  key.kv_rank = rank;
  key.cache_salt = salt;
  return key;
}

struct Fixture {
  KvEventLog log{{}, 1};
  TokenBindings bindings{1u << 20};
  KvEventRecorder recorder{&log, &bindings, store::ChunkSizes(2)};

  // Binds chunks 1 and 2 of a prompt of tokens {10, 11, 12, 13}.
  void BindPrompt(const std::string& model = "m") {
    std::vector<store::ChunkHash> hashes(2);
    hashes[0][0] = 1;
    hashes[1][0] = 2;
    const std::vector<std::uint32_t> tokens{10, 11, 12, 13};
    bindings.Bind(model, hashes, 0, tokens, 2);
  }
  std::vector<KvEvent> All() { return log.ReadAfter(std::nullopt, 0, 1000).events; }
};

TEST(KvEventRecorder, AStoredChunkIsOneRecordWithItsTokensAndParentWhateverItsRanks) {
  Fixture f;
  f.BindPrompt();
  // Two ranks of two chunks, chunk-major, as a TP2 store admits them.
  const std::vector<store::ObjectKey> keys{Key(1, 0), Key(1, 1), Key(2, 0), Key(2, 1)};
  const std::vector<std::uint64_t> bytes(4, 4096);
  f.recorder.OnAdmitted(keys, bytes, store::AdmissionSource::kWriter);
  const auto events = f.All();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, KvEventKind::kStored);
  EXPECT_EQ(events[0].medium, kMediumCpu);
  EXPECT_EQ(events[0].location, "L1");
  EXPECT_EQ(events[0].block_hashes, std::vector<store::ChunkHash>{keys[0].chunk_hash});
  EXPECT_FALSE(events[0].parent_block_hash);
  EXPECT_EQ(ToVector(events[0].token_ids()), (std::vector<std::uint32_t>{10, 11}));
  EXPECT_EQ(events[1].parent_block_hash, keys[0].chunk_hash);
  EXPECT_EQ(ToVector(events[1].token_ids()), (std::vector<std::uint32_t>{12, 13}));
  EXPECT_EQ(events[1].block_size, 2u);
  EXPECT_EQ(f.recorder.Stats().unbound_stores, 0u);
}

// Each event's block size is its model's chunk size (--model-chunk-size);
// a clear, of every model, carries the default.
TEST(KvEventRecorder, AnEventsBlockSizeIsItsModelsChunkSize) {
  KvEventLog log{{}, 1};
  TokenBindings bindings{1u << 20};
  KvEventRecorder recorder{&log, &bindings, store::ChunkSizes(2, {{"hybrid", 4}})};
  std::vector<store::ChunkHash> hashes(1);
  hashes[0][0] = 1;
  const std::vector<std::uint32_t> tokens{10, 11, 12, 13};
  bindings.Bind("m", hashes, 0, tokens, 2);
  bindings.Bind("hybrid", hashes, 0, tokens, 4);
  const std::vector<std::uint64_t> bytes{4096};
  recorder.OnAdmitted(std::vector{Key(1, 0, "", "m")}, bytes, store::AdmissionSource::kWriter);
  recorder.OnAdmitted(std::vector{Key(1, 0, "", "hybrid")}, bytes, store::AdmissionSource::kWriter);
  recorder.OnEvicted(std::vector{Key(1, 0, "", "hybrid")}, bytes);
  recorder.OnCleared();
  const auto events = log.ReadAfter(std::nullopt, 0, 1000).events;
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].block_size, 2u);
  EXPECT_EQ(ToVector(events[0].token_ids()), (std::vector<std::uint32_t>{10, 11}));
  EXPECT_EQ(events[1].block_size, 4u);
  EXPECT_EQ(ToVector(events[1].token_ids()), (std::vector<std::uint32_t>{10, 11, 12, 13}));
  EXPECT_EQ(events[2].kind, KvEventKind::kRemoved);
  EXPECT_EQ(events[2].block_size, 4u);
  EXPECT_EQ(events[3].kind, KvEventKind::kCleared);
  EXPECT_EQ(events[3].block_size, 2u);
}

// TP2's workers commit their ranks separately: the chunk is announced by
// rank 0's object alone, once, and withdrawn when rank 0's goes.
TEST(KvEventRecorder, OtherRanksCommittedOrEvictedApartAnnounceNothing) {
  Fixture f;
  f.BindPrompt();
  auto packed = [](std::int64_t rank) { return store::PackKvRank(2, rank).value(); };
  const std::vector<std::uint64_t> bytes{4096};
  f.recorder.OnAdmitted(std::vector{Key(1, packed(1))}, bytes, store::AdmissionSource::kWriter);
  EXPECT_TRUE(f.All().empty());
  f.recorder.OnAdmitted(std::vector{Key(1, packed(0))}, bytes, store::AdmissionSource::kWriter);
  ASSERT_EQ(f.All().size(), 1u);
  f.recorder.OnEvicted(std::vector{Key(1, packed(1))}, bytes);
  EXPECT_EQ(f.All().size(), 1u);
  store::ObjectKey second_group = Key(1, packed(0));
  second_group.object_group_id = 1;  // a hybrid model's second KV group
  f.recorder.OnEvicted(std::vector{second_group}, bytes);
  EXPECT_EQ(f.All().size(), 1u);
  f.recorder.OnEvicted(std::vector{Key(1, packed(0))}, bytes);
  ASSERT_EQ(f.All().size(), 2u);
  EXPECT_EQ(f.All()[1].kind, KvEventKind::kRemoved);
}

TEST(KvEventRecorder, AChunkWithoutBoundTokensGetsNoStoredRecordAndIsCounted) {
  Fixture f;
  const std::vector<store::ObjectKey> keys{Key(9, 0)};
  f.recorder.OnAdmitted(keys, std::vector<std::uint64_t>{1}, store::AdmissionSource::kTier);
  EXPECT_TRUE(f.All().empty());
  EXPECT_EQ(f.recorder.Stats().unbound_stores, 1u);
}

TEST(KvEventRecorder, RemovalsAreOneRecordPerModelAndTenant) {
  Fixture f;
  const std::vector<store::ObjectKey> keys{Key(1, 0), Key(1, 1, ""), Key(2, 0, "tenant-a"),
                                          Key(3, 0, "", "other")};
  f.recorder.OnEvicted(keys, std::vector<std::uint64_t>(4, 1));
  const auto events = f.All();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, KvEventKind::kRemoved);
  EXPECT_EQ(events[0].block_hashes.size(), 1u);  // chunk 1's two ranks: one hash
  EXPECT_TRUE(events[0].tenant.empty());
  EXPECT_EQ(events[1].block_hashes, std::vector<store::ChunkHash>{keys[2].chunk_hash});
  EXPECT_EQ(events[2].model_name, "other");
}

TEST(KvEventRecorder, ATenantIsAStableOpaqueNameNeverTheSalt) {
  Fixture f;
  const std::string salt = "secret-salt-of-tenant-a";
  const std::string name = f.recorder.TenantOf(salt);
  EXPECT_EQ(name.size(), 16u);
  EXPECT_EQ(name, f.recorder.TenantOf(salt));
  EXPECT_NE(name, f.recorder.TenantOf("secret-salt-of-tenant-b"));
  EXPECT_EQ(name.find("secret"), std::string::npos);
  EXPECT_TRUE(f.recorder.TenantOf("").empty());
  // Another server (another key) names the same salt differently.
  Fixture g;
  EXPECT_NE(name, g.recorder.TenantOf(salt));
  f.recorder.OnDeleted(std::vector<store::ObjectKey>{Key(1, 0, salt)}, std::vector<std::uint64_t>{1});
  EXPECT_EQ(f.All().at(0).tenant, name);
}

// Request tags make tagged and untagged stores of the same tokens different
// objects (same chunk hashes): a router must be able to tell their events
// apart too, so tags are part of the tenant (issue 22's review).
TEST(KvEventRecorder, TaggedAndUntaggedObjectsOfOneChunkNameDifferentTenants) {
  Fixture f;
  f.BindPrompt();
  store::ObjectKey untagged = Key(1, 0), tagged = Key(1, 0), other_tag = Key(1, 0);
  tagged.tags = "team%a";
  other_tag.tags = "team%b";
  f.recorder.OnDeleted(std::vector<store::ObjectKey>{untagged, tagged, other_tag},
                       std::vector<std::uint64_t>(3, 1));
  const auto events = f.All();
  ASSERT_EQ(events.size(), 3u) << "one removal per tenant";
  EXPECT_TRUE(events[0].tenant.empty());
  EXPECT_EQ(events[1].tenant.size(), 16u);
  EXPECT_NE(events[1].tenant, events[2].tenant);
  EXPECT_EQ(events[1].tenant.find("team"), std::string::npos) << "tags are not published";
  // A salt and a tag set never spell the same tenant.
  EXPECT_NE(f.recorder.TenantOf("team%a", ""), f.recorder.TenantOf("", "team%a"));
  EXPECT_EQ(f.recorder.TenantOf("s", ""), f.recorder.TenantOf("s"));
}

TEST(KvEventRecorder, L2WritesAndDropsNameTheirAdapterAsStorage) {
  Fixture f;
  f.BindPrompt();
  const std::vector<store::ObjectKey> keys{Key(2, 0)};
  f.recorder.OnL2Stored("resp:redis", keys);
  f.recorder.OnL2Removed("fs:/data/l2", keys);
  const auto events = f.All();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, KvEventKind::kStored);
  EXPECT_EQ(events[0].medium, kMediumStorage);
  EXPECT_EQ(events[0].location, "resp:redis");
  EXPECT_EQ(ToVector(events[0].token_ids()), (std::vector<std::uint32_t>{12, 13}));
  EXPECT_EQ(events[1].kind, KvEventKind::kRemoved);
  EXPECT_EQ(events[1].location, "fs:/data/l2");
}

TEST(KvEventRecorder, AClearIsOneRecord) {
  Fixture f;
  f.recorder.OnCleared();
  const auto events = f.All();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvEventKind::kCleared);
}

TEST(KvEventRecorder, NothingIsRecordedWhenTheLogIsOff) {
  KvEventLog log({.max_events = 0}, 1);
  TokenBindings bindings(0);
  KvEventRecorder recorder(&log, &bindings, store::ChunkSizes(2));
  recorder.OnEvicted(std::vector<store::ObjectKey>{Key(1, 0)}, std::vector<std::uint64_t>{1});
  recorder.OnCleared();
  EXPECT_EQ(log.Stats().appended, 0u);
}

}  // namespace
}  // namespace lmcache::events
