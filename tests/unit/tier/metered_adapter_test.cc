// MeteredAdapter: per-adapter in-flight objects and call latencies on top of
// the wrapped adapter's own stats.
#include "tier/metered_adapter.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <vector>

#include "fakes/keys.h"
#include "tier/mock/mock_adapter.h"

namespace lmcache::tier {
namespace {

using testing::KeyN;

// Holds every Load until the test opens the gate; the rest goes to a mock.
class GatedAdapter final : public L2Adapter {
 public:
  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override {
    mock_.SubmitStore(objects, std::move(done));
  }
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override {
    return mock_.LookupAndLock(keys);
  }
  void Unlock(std::span<const store::ObjectKey> keys) override { mock_.Unlock(keys); }
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
    lock.unlock();
    mock_.SubmitLoad(reads, std::move(done));
  }
  L2AdapterStats Stats() const override { return mock_.Stats(); }

  void WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return entered_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  MockAdapter mock_{{}};
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool open_ = false;
};

TEST(MeteredAdapterTest, CountsCallsAndKeepsTheAdaptersOwnStats) {
  MeteredAdapter metered(std::make_unique<MockAdapter>(MockAdapterConfig{}));
  const std::vector<store::ObjectKey> keys = {KeyN(1), KeyN(2)};
  std::vector<std::byte> a(1000, std::byte{1}), b(2000, std::byte{2});
  const std::vector<L2Write> writes = {{&keys[0], a}, {&keys[1], b}};
  for (const Status& s : metered.Store(writes)) ASSERT_TRUE(s.ok());
  EXPECT_EQ(metered.LookupAndLock(keys), (std::vector<bool>{true, true}));
  metered.Unlock(keys);
  std::vector<std::byte> out(1000);
  const std::vector<L2Read> reads = {{&keys[0], out}};
  EXPECT_EQ(metered.Load(reads)[0], L2LoadOutcome::kLoaded);
  EXPECT_EQ(metered.Load(reads)[0], L2LoadOutcome::kLoaded);
  EXPECT_EQ(out, a);

  const L2AdapterStats s = metered.Stats();
  EXPECT_EQ(s.type, "mock");
  EXPECT_EQ(s.stored_objects, 2u);
  EXPECT_EQ(s.loaded_objects, 2u);
  EXPECT_EQ(s.store_latency.count, 1u);  // one batched call of two objects
  EXPECT_EQ(s.lookup_latency.count, 1u);
  EXPECT_EQ(s.load_latency.count, 2u);
  EXPECT_EQ(s.storing_objects + s.loading_objects + s.looking_up_keys, 0u);
}

TEST(MeteredAdapterTest, ObjectsInACallAreInFlightUntilItReturns) {
  auto gated = std::make_unique<GatedAdapter>();
  GatedAdapter* gate = gated.get();
  MeteredAdapter metered(std::move(gated));
  const std::vector<store::ObjectKey> keys = {KeyN(1), KeyN(2), KeyN(3)};
  std::vector<std::byte> bytes(100, std::byte{7});
  std::vector<L2Write> writes;
  for (const auto& k : keys) writes.push_back({&k, bytes});
  for (const Status& s : metered.Store(writes)) ASSERT_TRUE(s.ok());

  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(100));
  std::vector<L2Read> reads;
  for (std::size_t i = 0; i < 3; ++i) reads.push_back({&keys[i], out[i]});
  auto load = std::async(std::launch::async, [&] { return metered.Load(reads); });
  gate->WaitEntered();
  EXPECT_EQ(metered.Stats().loading_objects, 3u);
  EXPECT_EQ(metered.Stats().load_latency.count, 0u);  // recorded when the call returns
  gate->Open();
  for (const L2LoadOutcome o : load.get()) EXPECT_EQ(o, L2LoadOutcome::kLoaded);
  EXPECT_EQ(metered.Stats().loading_objects, 0u);
  EXPECT_EQ(metered.Stats().load_latency.count, 1u);
}

// Keeps each load's completion until the test runs it (a device that
// completes on its own).
class CompletesLater final : public L2Adapter {
 public:
  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override {
    done(std::vector<Status>(objects.size()));
  }
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override {
    return std::vector<bool>(keys.size(), true);
  }
  void Unlock(std::span<const store::ObjectKey>) override {}
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override {
    count_ = reads.size();
    done_ = std::move(done);
  }
  L2AdapterStats Stats() const override { return {}; }
  bool CompletesAsynchronously() const override { return true; }
  void Complete() { done_(std::vector<L2LoadOutcome>(count_, L2LoadOutcome::kLoaded)); }

 private:
  std::size_t count_ = 0;
  LoadDone done_;
};

TEST(MeteredAdapterTest, AnAsynchronousLoadIsInFlightUntilItsCompletionNotUntilSubmitReturns) {
  auto later = std::make_unique<CompletesLater>();
  CompletesLater* device = later.get();
  MeteredAdapter metered(std::move(later));
  EXPECT_TRUE(metered.CompletesAsynchronously());
  const std::vector<store::ObjectKey> keys = {KeyN(1), KeyN(2)};
  std::vector<std::byte> a(10), b(10);
  const std::vector<L2Read> reads = {{&keys[0], a}, {&keys[1], b}};
  std::vector<L2LoadOutcome> seen;
  metered.SubmitLoad(reads, [&seen](std::vector<L2LoadOutcome> o) { seen = std::move(o); });
  EXPECT_EQ(metered.Stats().loading_objects, 2u) << "submitted, not completed";
  EXPECT_EQ(metered.Stats().load_latency.count, 0u);
  device->Complete();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(metered.Stats().loading_objects, 0u);
  EXPECT_EQ(metered.Stats().load_latency.count, 1u);
}

}  // namespace
}  // namespace lmcache::tier
