// L2Tier: the assembled tier, store and prefetch controllers on one table.
// Reference #5032: a failed load's cleanup finished the write and then
// deleted, so the store controller copied never-loaded bytes to L2. Here a
// load that fails in the middle of a batch admits only what loaded, nothing
// of it is written back to L2, L2's own objects are untouched, and no lock,
// lock or staged byte is left.
#include "tier/l2_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "common/mutex.h"
#include "fakes/keys.h"
#include "fakes/l1_table.h"
#include "tier/metered_adapter.h"
#include "tier/mock/mock_adapter.h"

namespace lmcache::tier {
namespace {

using testing::KeysN;
constexpr std::size_t kObject = 128 * 1024;
constexpr auto kWait = std::chrono::seconds(30);

TEST(L2Tier, ALoadFailingMidBatchAdmitsOnlyWhatLoadedAndWritesNothingBack) {
  testing::L1Table l1(16 << 20);
  L2Config config;
  auto spec = ParseL2AdapterSpec(R"({"type":"mock"})", 1);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  config.adapters.push_back(*spec);
  config.prefetch.chunks_per_batch = 4;
  auto tier = L2Tier::Create(config, &l1.table());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  (*tier)->Start();

  // Six chunks written through L1 to L2, then out of L1.
  const auto keys = KeysN(0, 6);
  for (std::size_t i = 0; i < keys.size(); ++i) l1.Store(keys[i], kObject, i);
  ASSERT_TRUE((*tier)->store_controller().WaitIdle(kWait));
  ASSERT_EQ((*tier)->Stats().store.stored, 6u);
  for (const auto& key : keys) ASSERT_EQ(l1.table().Delete({&key, 1}, true)[0], store::DeleteOutcome::kDeleted);
  // The tier meters every adapter it builds; the mock is inside.
  auto& metered = dynamic_cast<MeteredAdapter&>((*tier)->cascade().Current().adapter(0));
  auto& mock = dynamic_cast<MockAdapter&>(metered.inner());
  ASSERT_TRUE(mock.CorruptForTest(keys[2]));  // the middle of the first batch of four

  PrefetchRequest request;
  request.keys = keys;
  request.object_bytes = kObject;
  request.owner = store::Owner::Session(5);
  Prefetcher* prefetcher = (*tier)->prefetcher();
  auto* controller = dynamic_cast<PrefetchController*>(prefetcher);
  ASSERT_NE(controller, nullptr);
  const auto landed = controller->Wait(prefetcher->Submit(request), kWait);
  ASSERT_TRUE(landed);
  EXPECT_EQ(landed->chunks, 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(l1.Read(keys[i]), testing::ObjectBytes(kObject, i));
  for (std::size_t i = 2; i < 6; ++i) EXPECT_FALSE(l1.table().Find(keys[i])) << i;
  EXPECT_EQ(l1.allocator().UsedBytes(), 2 * l1.allocator().AlignedSize(kObject));
  l1.table().ReleaseRead(landed->lease);

  ASSERT_TRUE((*tier)->store_controller().WaitIdle(kWait));
  const L2Stats stats = (*tier)->Stats();
  EXPECT_EQ(stats.store.stored, 6u) << "nothing loaded (or not) was written back";
  EXPECT_EQ(stats.prefetch.loaded_chunks, 2u);
  EXPECT_EQ(stats.prefetch.load_failed_chunks, 4u);
  // L2 still serves the intact objects after the failed one (its locks released).
  std::vector<std::byte> out(kObject);
  const std::vector<L2Read> reads = {{&keys[4], out}};
  EXPECT_EQ(mock.Load(reads)[0], L2LoadOutcome::kLoaded);
  EXPECT_EQ(out, testing::ObjectBytes(kObject, 4));
  (*tier)->Stop();
  l1.ExpectBalanced();
}

// Every adapter is shown the L1 pool once, before it is used, through the
// meter the tier wraps it in (AttachMemory, for devices that register memory).
TEST(L2Tier, ShowsEachAdapterTheWholeL1PoolBeforeUse) {
  testing::L1Table l1(16 << 20);
  L2Config config;
  for (int i = 0; i < 2; ++i) {
    auto spec = ParseL2AdapterSpec(R"({"type":"mock"})", i + 1);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    config.adapters.push_back(*spec);
  }
  auto tier = L2Tier::Create(config, &l1.table());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  for (std::size_t a = 0; a < 2; ++a) {
    auto& mock = dynamic_cast<MockAdapter&>(dynamic_cast<MeteredAdapter&>((*tier)->cascade().Current().adapter(a)).inner());
    EXPECT_EQ(mock.attached_bytes(), l1.allocator().capacity_bytes()) << a;
    EXPECT_EQ(l1.table().PoolBytes().size(), l1.allocator().capacity_bytes());
  }
}

L2AdapterSpec Spec(const char* json) {
  auto spec = ParseL2AdapterSpecAt(json, "test");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : L2AdapterSpec{};
}

std::unique_ptr<L2Tier> MakeTier(testing::L1Table& l1, std::vector<const char*> adapters) {
  L2Config config;
  for (const char* json : adapters) config.adapters.push_back(Spec(json));
  auto tier = L2Tier::Create(config, &l1.table());
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

const L2AdapterStats* Named(const L2Stats& stats, const std::string& name) {
  for (const L2AdapterStats& a : stats.adapters) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::vector<std::string> CascadeNames(const L2Tier& tier) {
  std::vector<std::string> names;
  const L2Cascade::View view = tier.cascade().Current();
  for (std::size_t i = 0; i < view.size(); ++i) names.push_back(view.member(i).name);
  return names;
}

// Each key of `keys` resident in L1 with the bytes of its seed `first + i`.
void ExpectBytes(testing::L1Table& l1, std::span<const store::ObjectKey> keys, std::uint64_t first) {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(l1.Read(keys[i]), testing::ObjectBytes(kObject, first + i)) << i;
  }
}

// DELETE /config/adapters' promise: a prefetch that planned on the adapter
// finishes on it (the removal waits for it), and lookups after the removal
// plan on the rest of the cascade.
TEST(L2Tier, RemovingAnAdapterFinishesTheLoadsPlannedOnItAndLaterOnesFallBack) {
  testing::L1Table l1(16 << 20);
  auto tier = MakeTier(l1, {R"({"type":"mock","name":"base"})"});
  ASSERT_NE(tier, nullptr);
  tier->Start();
  // "slow" joins first in the cascade, so loads plan on it.
  auto added = tier->AddAdapter(
      Spec(R"({"type":"fault_inject","name":"slow","delay_ms":300,"inner":{"type":"mock"}})"), 0);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_EQ(CascadeNames(*tier), (std::vector<std::string>{"slow", "base"}));

  const auto keys = KeysN(0, 4);
  for (std::size_t i = 0; i < keys.size(); ++i) l1.Store(keys[i], kObject, i);
  ASSERT_TRUE(tier->store_controller().WaitIdle(kWait));
  ASSERT_EQ(Named(tier->Stats(), "slow")->stored_objects, 4u);
  ASSERT_EQ(Named(tier->Stats(), "base")->stored_objects, 4u);
  for (const auto& key : keys) ASSERT_EQ(l1.table().Delete({&key, 1}, true)[0], store::DeleteOutcome::kDeleted);

  auto* controller = dynamic_cast<PrefetchController*>(tier->prefetcher());
  PrefetchRequest request;
  request.keys = keys;
  request.object_bytes = kObject;
  request.owner = store::Owner::Session(5);
  const PrefetchHandle handle = controller->Submit(request);
  std::atomic<bool> landed{false};
  controller->NotifyWhenLanded(handle, [&landed] { landed = true; });
  // Wait until the request is with the slow adapter (its lookup or its load).
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (true) {
    const L2Stats stats = tier->Stats();
    const L2AdapterStats* slow = Named(stats, "slow");
    ASSERT_NE(slow, nullptr);
    if (slow->looking_up_keys + slow->loading_objects > 0) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the prefetch never reached the adapter";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto removal = tier->RemoveAdapter("slow", kWait);
  ASSERT_TRUE(removal.ok()) << removal.status().ToString();
  EXPECT_EQ(removal->drained, L2Cascade::Drained::kDrained);
  EXPECT_TRUE(landed.load()) << "the removal returned before the load planned on it finished";
  EXPECT_EQ(CascadeNames(*tier), (std::vector<std::string>{"base"}));
  const auto first = controller->Wait(handle, kWait);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->chunks, 4u);
  ExpectBytes(l1, keys, 0);
  l1.table().ReleaseRead(first->lease);
  EXPECT_EQ(Named(tier->Stats(), "base")->loaded_objects, 0u) << "the first load came from slow";

  // After the removal: the rest of the cascade serves the same prompt.
  for (const auto& key : keys) ASSERT_EQ(l1.table().Delete({&key, 1}, true)[0], store::DeleteOutcome::kDeleted);
  const auto second = controller->Wait(controller->Submit(request), kWait);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->chunks, 4u);
  ExpectBytes(l1, keys, 0);
  l1.table().ReleaseRead(second->lease);
  const L2Stats stats = tier->Stats();
  EXPECT_EQ(Named(stats, "base")->loaded_objects, 4u);
  EXPECT_EQ(stats.cascade.added, 1u);
  EXPECT_EQ(stats.cascade.removed, 1u);
  EXPECT_EQ(stats.cascade.draining, 0u);
  tier->Stop();
  l1.ExpectBalanced();
}

// The runtime cascade under traffic (the TSan build runs it): a writer
// stores prompts through L1 to L2, two readers prefetch them back, while
// adapters join and leave the cascade at either end, a slow one among them.
// Every loaded byte is right, every removal drains, nothing stays locked.
TEST(L2Tier, AdaptersJoinAndLeaveWhileStoresAndPrefetchesRun) {
  constexpr std::size_t kChunks = 4;  // per prompt; well under TSan's 64 held locks
  constexpr std::size_t kPrompts = 120;
  // Room for every prompt at once: an object a reader's lock kept from its
  // delete stays until a reader loads that prompt again.
  testing::L1Table l1(64 << 20);
  auto tier = MakeTier(l1, {R"({"type":"mock","name":"base"})"});
  ASSERT_NE(tier, nullptr);
  tier->Start();
  auto* controller = dynamic_cast<PrefetchController*>(tier->prefetcher());
  std::atomic<std::size_t> written{0};  // prompts in L2 (base) and out of L1
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> loaded_chunks{0};

  std::thread writer([&] {
    for (std::size_t p = 0; p < kPrompts; ++p) {
      const auto keys = KeysN(p * kChunks, kChunks);
      for (std::size_t i = 0; i < kChunks; ++i) l1.Store(keys[i], kObject, p * kChunks + i);
      ASSERT_TRUE(tier->store_controller().WaitIdle(kWait));
      for (const auto& key : keys) (void)l1.table().Delete({&key, 1}, false);
      written = p + 1;
    }
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937 random(static_cast<unsigned>(r + 1));
      while (!done.load()) {
        const std::size_t ready = written.load();
        if (ready == 0) {
          std::this_thread::yield();
          continue;
        }
        const std::size_t p = random() % ready;
        PrefetchRequest request;
        request.keys = KeysN(p * kChunks, kChunks);
        request.object_bytes = kObject;
        request.owner = store::Owner::Session(100 + static_cast<std::uint64_t>(r));
        const auto result = controller->Wait(controller->Submit(request), kWait);
        ASSERT_TRUE(result);
        if (result->lease == store::kNoLease) continue;
        // The base adapter holds every written prompt: only L1 running
        // short may cut the prefix.
        ExpectBytes(l1, std::span(request.keys).first(result->chunks), p * kChunks);
        loaded_chunks += result->chunks;
        l1.table().ReleaseRead(result->lease);
        for (const auto& key : request.keys) (void)l1.table().Delete({&key, 1}, false);
      }
    });
  }
  const char* kJoining[] = {
      R"({"type":"mock","name":"extra"})",
      R"({"type":"fault_inject","name":"extra","delay_ms":2,"inner":{"type":"mock"}})",
  };
  std::size_t changes = 0;
  while (written.load() < kPrompts) {
    const std::size_t position = changes % 2 == 0 ? 0 : tier->cascade().Current().size();
    auto added = tier->AddAdapter(Spec(kJoining[changes % 2]), position);
    ASSERT_TRUE(added.ok()) << added.status().ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto removal = tier->RemoveAdapter("extra", kWait);
    ASSERT_TRUE(removal.ok()) << removal.status().ToString();
    EXPECT_EQ(removal->drained, L2Cascade::Drained::kDrained);
    changes += 1;
  }
  done = true;
  writer.join();
  for (auto& t : readers) t.join();
  ASSERT_TRUE(tier->store_controller().WaitIdle(kWait));
  const L2Stats stats = tier->Stats();
  EXPECT_GE(changes, 2u);
  EXPECT_EQ(stats.cascade.added, changes);
  EXPECT_EQ(stats.cascade.removed, changes);
  EXPECT_EQ(stats.cascade.draining, 0u);
  EXPECT_EQ(CascadeNames(*tier), (std::vector<std::string>{"base"}));
  EXPECT_EQ(Named(stats, "base")->stored_objects, kPrompts * kChunks) << "every prompt reached base";
  EXPECT_GT(loaded_chunks.load(), 0u);
  tier->Stop();
  l1.ExpectBalanced();
}

// What the KV events hear of the tier.
class RecordingObserver final : public L2EventObserver {
 public:
  void OnL2Stored(const std::string& location, std::span<const store::ObjectKey> keys) override {
    MutexLock lock(&mu_);
    stored_[location] += keys.size();
  }
  void OnL2Removed(const std::string& location, std::span<const store::ObjectKey> keys) override {
    MutexLock lock(&mu_);
    removed_[location] += keys.size();
  }
  std::map<std::string, std::size_t> stored() const {
    MutexLock lock(&mu_);
    return stored_;
  }
  std::map<std::string, std::size_t> removed() const {
    MutexLock lock(&mu_);
    return removed_;
  }

 private:
  mutable Mutex mu_;
  std::map<std::string, std::size_t> stored_ LMC_GUARDED_BY(mu_);
  std::map<std::string, std::size_t> removed_ LMC_GUARDED_BY(mu_);
};

// A router that follows the KV events learns that a removed tier's objects
// are no longer served here; a tier closed because the server stops
// announces nothing (its objects are still there for the next start).
TEST(L2Tier, ATierRemovedAnnouncesWhatItHeldAsRemoved) {
  testing::L1Table l1(16 << 20);
  RecordingObserver observer;
  {
    auto tier = MakeTier(l1, {R"({"type":"mock","name":"base"})"});
    ASSERT_NE(tier, nullptr);
    tier->SetEventObserver(&observer);
    tier->Start();
    ASSERT_TRUE(tier->AddAdapter(Spec(R"({"type":"mock","name":"extra"})"), std::nullopt).ok());
    const auto keys = KeysN(0, 5);
    for (std::size_t i = 0; i < keys.size(); ++i) l1.Store(keys[i], kObject, i);
    ASSERT_TRUE(tier->store_controller().WaitIdle(kWait));
    EXPECT_EQ(observer.stored(), (std::map<std::string, std::size_t>{{"mock", 10}}));
    const auto removal = tier->RemoveAdapter("extra", kWait);
    ASSERT_TRUE(removal.ok());
    EXPECT_EQ(removal->description, "mock");
    EXPECT_EQ(observer.removed(), (std::map<std::string, std::size_t>{{"mock", 5}}));
    tier->Stop();
  }
  EXPECT_EQ(observer.removed(), (std::map<std::string, std::size_t>{{"mock", 5}}))
      << "the tier's end announced base's objects";
  l1.ExpectBalanced();
}

}  // namespace
}  // namespace lmcache::tier
