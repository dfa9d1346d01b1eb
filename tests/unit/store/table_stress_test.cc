// Many threads drive the object table and allocator at once: writers stage and
// admit overlapping keys, readers lock and release (some consuming a shared
// lookup lease), a deleter and the evictor run alongside, and an owner departs
// mid-run. Afterwards every lock balances and the allocator's accounting
// matches the table's. Run under TSan in CI.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <cstring>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "fakes/aligned_buffer.h"
#include "fakes/keys.h"
#include "store/evictor.h"
#include "store/object_table.h"

namespace lmcache::store {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kObject = 256 * 1024;
constexpr int kKeySpace = 200;

// A 24 MiB pool (96 objects) in 16 shards, with an evictor every millisecond.
struct StressPool {
  StressPool() {
    alloc::SlabAllocatorConfig alloc_config;
    alloc_config.slab_target_bytes = 2 * kMiB;
    allocator = std::move(alloc::SlabAllocator::Create(buffer.span(), alloc_config)).value();
    ObjectTableConfig config;
    config.num_shards = 16;
    table = std::make_unique<ObjectTable>(allocator.get(), &lru, &SteadyClock::Instance(), config);
    EvictorConfig evictor_config;
    evictor_config.interval_ms = 1;
    evictor = std::make_unique<Evictor>(table.get(), evictor_config);
  }
  testing::AlignedBuffer buffer{24 * kMiB};
  std::unique_ptr<alloc::SlabAllocator> allocator;
  LruPolicy lru;
  std::unique_ptr<ObjectTable> table;
  std::unique_ptr<Evictor> evictor;
};

TEST(TableStress, ConcurrentWritersReadersEvictionStayConsistent) {
  StressPool pool;  // room for 96 objects of a 200-key space
  auto& allocator = pool.allocator;
  ObjectTable& table = *pool.table;
  Evictor& evictor = *pool.evictor;
  evictor.Start();

  std::atomic<bool> failed{false};
  std::atomic<int> writers_running{3};
  std::atomic<std::uint64_t> bytes_verified{0};
  auto writer = [&](std::uint64_t id) {
    const Owner owner = Owner::Instance(id);
    std::mt19937 rng(static_cast<unsigned>(id));
    for (int iter = 0; iter < 300; ++iter) {
      const auto first = rng() % (kKeySpace - 8);
      const auto keys = testing::KeysN(first, 1 + rng() % 8);
      auto r = table.ReserveWrite(
          keys, kObject, owner,
          iter % 2 ? AllocationMode::kAllOrNothing : AllocationMode::kLongestPrefix);
      if (!r.ok()) {
        failed = true;
        return;
      }
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (r->outcomes[i] != WriteReservation::kReserved) continue;
        // Write a pattern naming the key into the buffer the writer owns.
        std::byte* p = *allocator->Resolve(r->offsets[i], kObject);
        std::memset(p, static_cast<int>((first + i) & 0xff), kObject);
      }
      if (rng() % 10 == 0) {
        table.AbortWrite(r->lease);
      } else {
        table.FinishWrite(r->lease);
      }
    }
  };
  // A lookup lease readers consume their shares from while it lasts.
  std::atomic<LeaseId> shared_lookup{kNoLease};
  auto reader = [&](std::uint64_t id) {
    const Owner owner = Owner::Instance(id);
    std::mt19937 rng(static_cast<unsigned>(id));
    // At least 400 rounds, and on until the writers are done and this reader
    // has checked some bytes: on a fast machine the readers could otherwise
    // finish before anything is admitted. Bounded all the same.
    for (int iter = 0; iter < 400 || ((writers_running.load() > 0 || bytes_verified.load() == 0) &&
                                      iter < 2'000'000);
         ++iter) {
      const auto first = rng() % (kKeySpace - 8);
      const auto keys = testing::KeysN(first, 1 + rng() % 8);
      const LeaseId lookup = shared_lookup.load();
      ReadRequest request;
      request.keys = keys;
      request.owner = owner;
      request.mode = ReadMode::kPrefix;
      request.consume = std::span(&lookup, lookup == kNoLease ? 0 : 1);
      auto grants = table.AcquireRead(request);
      if (!grants.ok()) {
        failed = true;
        return;
      }
      for (std::size_t i = 0; i < grants->granted; ++i) {
        // A read-locked object is never evicted or reused: its bytes hold.
        const std::byte* p = *allocator->Resolve(grants->grants[i].offset, kObject);
        const auto expected = static_cast<std::byte>((first + i) & 0xff);
        if (p[0] != expected || p[kObject - 1] != expected) failed = true;
        bytes_verified += kObject;
      }
      if (grants->granted > 0 && table.ReleaseRead(grants->lease) != grants->granted) {
        failed = true;  // exactly its own locks come back
      }
    }
  };
  std::vector<std::thread> threads;
  for (std::uint64_t w = 1; w <= 3; ++w) {
    threads.emplace_back([&, w] {
      writer(w);
      writers_running.fetch_sub(1);
    });
  }
  for (std::uint64_t r = 10; r <= 12; ++r) threads.emplace_back(reader, r);
  // Lookups: take 3 locks per object of a prefix, let readers consume, release the rest.
  threads.emplace_back([&] {
    const Owner session = Owner::Session(1);
    for (int i = 0; i < 200; ++i) {
      ReadRequest request;
      const auto keys = testing::KeysN(static_cast<std::uint64_t>(i % 150), 8);
      request.keys = keys;
      request.owner = session;
      request.count = 3;
      request.mode = ReadMode::kPrefix;
      auto lookup = table.AcquireRead(request);
      if (!lookup.ok()) {
        failed = true;
        return;
      }
      shared_lookup.store(lookup->lease);
      std::this_thread::yield();
      shared_lookup.store(kNoLease);
      table.ReleaseRead(lookup->lease);
    }
  });
  threads.emplace_back([&] {
    for (int i = 0; i < 100; ++i) table.Delete(testing::KeysN(i, 3), /*force=*/false);
  });
  // An owner that takes locks and departs without releasing them.
  threads.emplace_back([&] {
    const Owner departing = Owner::Instance(99);
    for (int i = 0; i < 50; ++i) {
      ReadRequest request;
      const auto keys = testing::KeysN(static_cast<std::uint64_t>(i), 4);
      request.keys = keys;
      request.owner = departing;
      request.count = 2;
      request.mode = ReadMode::kPrefix;
      (void)table.AcquireRead(request);
    }
    table.ReleaseOwner(departing);
  });
  for (auto& t : threads) t.join();
  evictor.Stop();

  EXPECT_FALSE(failed);
  EXPECT_GT(bytes_verified.load(), 0u);
  const TableStats stats = table.Stats();
  EXPECT_EQ(stats.locked_objects, 0u);  // every lock was released
  EXPECT_EQ(stats.read_leases, 0u);
  EXPECT_EQ(stats.write_leases, 0u);
  EXPECT_EQ(stats.staging_objects, 0u);
  EXPECT_EQ(stats.retired_objects, 0u);
  EXPECT_EQ(stats.resident_bytes, allocator->UsedBytes());
  EXPECT_EQ(table.Clear(/*force=*/false), stats.resident_objects);
  EXPECT_EQ(allocator->UsedBytes(), 0u);
  EXPECT_EQ(allocator->Stats().pool_free_bytes, allocator->capacity_bytes());
}

// Counts evictions per tenant as the table reports them.
class TenantEvictions final : public StoreListener {
 public:
  void OnAdmitted(std::span<const ObjectKey>, std::span<const std::uint64_t>,
                  AdmissionSource) override {}
  void OnEvicted(std::span<const ObjectKey> keys, std::span<const std::uint64_t>) override {
    MutexLock lock(&mu_);
    for (const ObjectKey& key : keys) evicted_[key.cache_salt] += 1;
  }
  void OnDeleted(std::span<const ObjectKey>, std::span<const std::uint64_t>) override {}
  std::uint64_t Of(const std::string& salt) {
    MutexLock lock(&mu_);
    return evicted_[salt];
  }

 private:
  Mutex mu_;
  std::map<std::string, std::uint64_t> evicted_ LMC_GUARDED_BY(mu_);
};

// Three tenants with quotas store far more than their quotas at once, with
// readers holding their objects and the evictor running every millisecond
// (LMCache #4817: the reference's per-tenant LRU on L1 killed its eviction
// thread). No tenant ever holds more than its quota, every eviction is of
// the storing tenant's own objects, and the evictor keeps running.
TEST(TableStress, TenantsUnderQuotaPressureEvictOnlyTheirOwnObjects) {
  StressPool pool;  // 96 objects; the quotas take 75
  auto& allocator = pool.allocator;
  ObjectTable& table = *pool.table;
  Evictor& evictor = *pool.evictor;
  TenantEvictions evictions;
  table.AddListener(&evictions);
  table.AddListener(&evictor);
  evictor.Start();
  const std::string salts[] = {"a", "b", "c"};
  const std::uint64_t limits[] = {20 * kObject, 25 * kObject, 30 * kObject};
  for (int t = 0; t < 3; ++t) ASSERT_TRUE(table.SetQuota(salts[t], limits[t]).ok());

  std::atomic<bool> failed{false};
  std::atomic<int> running{6};
  auto tenant_key = [](std::uint64_t n, const std::string& salt) {
    ObjectKey key = testing::KeyN(n);
    key.cache_salt = salt;
    return key;
  };
  auto writer = [&](int t, std::uint64_t id) {
    const Owner owner = Owner::Instance(id);
    std::mt19937 rng(static_cast<unsigned>(id));
    for (int iter = 0; iter < 400; ++iter) {
      std::vector<ObjectKey> keys;
      const std::uint64_t first = rng() % 400;
      for (std::uint64_t i = 0; i < 1 + rng() % 8; ++i) keys.push_back(tenant_key(first + i, salts[t]));
      auto r = table.ReserveWrite(keys, kObject, owner, AllocationMode::kLongestPrefix);
      if (!r.ok()) {
        failed = true;
        return;
      }
      table.FinishWrite(r->lease);
    }
  };
  auto reader = [&](int t, std::uint64_t id) {
    const Owner owner = Owner::Instance(id);
    std::mt19937 rng(static_cast<unsigned>(id));
    for (int iter = 0; iter < 400; ++iter) {
      std::vector<ObjectKey> keys;
      const std::uint64_t first = rng() % 400;
      for (std::uint64_t i = 0; i < 4; ++i) keys.push_back(tenant_key(first + i, salts[t]));
      ReadRequest request;
      request.keys = keys;
      request.owner = owner;
      request.mode = ReadMode::kPrefix;
      auto grants = table.AcquireRead(request);
      if (!grants.ok()) {
        failed = true;
        return;
      }
      std::this_thread::yield();
      if (grants->granted > 0) table.ReleaseRead(grants->lease);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      writer(t, 1 + static_cast<std::uint64_t>(t));
      running.fetch_sub(1);
    });
    threads.emplace_back([&, t] {
      reader(t, 10 + static_cast<std::uint64_t>(t));
      running.fetch_sub(1);
    });
  }
  // Samples every tenant's charge while they store: never past its quota.
  std::uint64_t samples = 0;
  while (running.load() > 0) {
    for (int t = 0; t < 3; ++t) {
      const std::uint64_t used = table.tenants().Get(salts[t]).used_bytes;
      if (used > limits[t]) {
        ADD_FAILURE() << salts[t] << " holds " << used << " bytes, over its quota " << limits[t];
        failed = true;
      }
    }
    samples += 1;
    std::this_thread::yield();
  }
  for (auto& t : threads) t.join();
  // The evictor still runs after the storm: wait (bounded) for its next pass.
  const std::uint64_t passes_before = evictor.Stats().passes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (evictor.Stats().passes <= passes_before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const EvictorStats evictor_stats = evictor.Stats();
  evictor.Stop();

  EXPECT_FALSE(failed);
  EXPECT_GT(samples, 0u);
  EXPECT_EQ(evictor_stats.errors, 0u);
  EXPECT_GT(evictor_stats.passes, passes_before);  // still running after the storm
  EXPECT_EQ(evictor_stats.evicted_objects, 0u);    // the pool was never short: no one's
  EXPECT_EQ(table.Stats().on_demand_evictions, 0u);  // objects went for anyone else
  std::uint64_t quota_evicted = 0;
  for (int t = 0; t < 3; ++t) {
    const TenantAccount account = table.tenants().Get(salts[t]);
    EXPECT_GT(account.quota_evicted_objects, 0u) << salts[t];
    EXPECT_EQ(evictions.Of(salts[t]), account.quota_evicted_objects) << salts[t];
    // Its quota held all along, and it used it: nobody else took its room.
    EXPECT_LE(account.used_bytes, limits[t]);
    EXPECT_GE(account.used_bytes, limits[t] - 8 * kObject) << salts[t];
    quota_evicted += account.quota_evicted_objects;
  }
  EXPECT_EQ(table.Stats().quota_evictions, quota_evicted);
  EXPECT_EQ(table.Stats().resident_bytes, allocator->UsedBytes());
}

}  // namespace
}  // namespace lmcache::store
