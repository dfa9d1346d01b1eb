// Object-table micro-benchmarks: the store path (reserve + finish write), the
// lookup path (read lock + release), and lock/unlock under thread contention.
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "alloc/slab_allocator.h"
#include "common/clock.h"
#include "store/eviction_policy.h"
#include "store/object_table.h"
#include "restart/pool_journal.h"

namespace lmcache::store {
namespace {

constexpr std::uint64_t kPoolBytes = 16ull << 30;  // address space only: never touched
constexpr std::uint64_t kChunk = 2 << 20;

std::vector<ObjectKey> Keys(std::size_t first, std::size_t count) {
  std::vector<ObjectKey> keys(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t n = first + i;
    for (int b = 0; b < 8; ++b) keys[i].chunk_hash[b] = static_cast<std::uint8_t>(n >> (8 * b));
    keys[i].chunk_hash[31] = 0x11;
    keys[i].model_name = "meta-llama/Llama-3.1-8B-Instruct";
    keys[i].kv_rank = (1 << 24) | (1 << 8);
  }
  return keys;
}

ObjectTableConfig ConfigWith(QuotaMode mode) {
  ObjectTableConfig config;
  config.quota_mode = mode;
  return config;
}

struct Fixture {
  explicit Fixture(QuotaMode quota_mode = QuotaMode::kOpen)
      : lru(quota_mode != QuotaMode::kOff) {
    void* base = std::aligned_alloc(1 << 21, 1 << 21);
    allocator =
        std::move(alloc::SlabAllocator::Create({static_cast<std::byte*>(base), kPoolBytes}, {}))
            .value();
    table = std::make_unique<ObjectTable>(allocator.get(), &lru, &SteadyClock::Instance(),
                                          ConfigWith(quota_mode));
  }
  std::unique_ptr<alloc::SlabAllocator> allocator;
  LruPolicy lru;
  std::unique_ptr<ObjectTable> table;
};

const Owner kWriter = Owner::Instance(1);

Fixture& Shared() {
  static Fixture* fixture = new Fixture();
  return *fixture;
}

// With --recover-pool: the table records every slot lent, object admitted and
// slot freed in a PoolJournal, whose sealer hashes each committed object. The
// pool is mapped (never written: its pages read as zeros) so the sealer has
// bytes to hash; docs/performance.md, "Crash recovery".
struct JournaledFixture {
  JournaledFixture() {
    void* base = mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    pool = {static_cast<std::byte*>(base), kPoolBytes};
    allocator = std::move(alloc::SlabAllocator::Create(pool, {})).value();
    const restart::JournalGeometry geometry{{kPoolBytes, 4096, 2 << 20, 64 << 20}, 0, 1};
    journal = std::move(restart::PoolJournal::Create("lmcache_l1_pool_bench_" + std::to_string(getpid()),
                                            geometry, pool))
                  .value();
    allocator->SetSlabObserver(journal.get());
    table = std::make_unique<ObjectTable>(allocator.get(), &lru, &SteadyClock::Instance(),
                                          ObjectTableConfig{});
    table->SetJournal(journal.get());
  }
  ~JournaledFixture() {
    table.reset();
    allocator.reset();
    journal.reset();
    munmap(pool.data(), pool.size());
  }
  std::span<std::byte> pool;
  std::unique_ptr<alloc::SlabAllocator> allocator;
  std::unique_ptr<restart::PoolJournal> journal;
  LruPolicy lru;
  std::unique_ptr<ObjectTable> table;
};

// Store a batch of `range(0)` chunks, then delete it (so the table stays small);
// range(1) = 1: with the crash-recovery journal.
void BM_StoreBatch(benchmark::State& state) {
  Fixture plain;
  std::unique_ptr<JournaledFixture> journaled;
  if (state.range(1) != 0) journaled = std::make_unique<JournaledFixture>();
  ObjectTable* table = journaled ? journaled->table.get() : plain.table.get();
  const auto keys = Keys(0, static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    auto r = table->ReserveWrite(keys, kChunk, kWriter, AllocationMode::kAllOrNothing);
    benchmark::DoNotOptimize(r);
    table->FinishWrite(r->lease);
    table->Delete(keys, /*force=*/false);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_StoreBatch)->ArgsProduct({{1, 16, 512}, {0, 1}})->ArgNames({"chunks", "journal"});

// A prompt's chunks of 1 KiB (range(0) of them: 32768 is a 32768-token prompt
// at chunk size 1) stored into a table already holding range(1) objects, the
// way the server stores them (the lease takes the keys over): reserve and
// finish timed, the delete that keeps the table's size untimed. Per-key cost
// grows with the batch and the table (cache misses of a larger index).
void BM_StorePromptIntoTable(benchmark::State& state) {
  Fixture fixture;
  ObjectTable& table = *fixture.table;
  const auto chunks = static_cast<std::size_t>(state.range(0));
  const auto resident = static_cast<std::size_t>(state.range(1));
  for (std::size_t first = 0; first < resident; first += 32768) {
    auto r = table.ReserveWrite(Keys(first, std::min<std::size_t>(32768, resident - first)), 1024,
                                kWriter, AllocationMode::kAllOrNothing);
    if (!r.ok() || r->reserved == 0) return state.SkipWithError("cannot fill the table");
    table.FinishWrite(r->lease);
  }
  std::size_t next = resident;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<ObjectKey> keys = Keys(next, chunks);
    next += chunks;
    state.ResumeTiming();
    auto r = table.ReserveWrite(std::move(keys), 1024, kWriter, AllocationMode::kAllOrNothing);
    if (!r.ok() || r->reserved != chunks) return state.SkipWithError("a prompt was not staged");
    const WriteCompletion done = table.FinishWrite(r->lease);
    state.PauseTiming();
    table.Delete(done.keys, /*force=*/false);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_StorePromptIntoTable)
    ->ArgsProduct({{512, 32768}, {0, 262144}})
    ->ArgNames({"chunks", "resident"})
    ->Unit(benchmark::kMicrosecond);

// The store path of BM_StoreBatch with quotas off (--quota-mode off: no
// ledger, no per-tenant order) and on, the keys' tenant given a quota that
// never binds (range(1) = 1): what per-tenant accounting costs a store,
// without the copy that dwarfs it on a server (docs/performance.md).
void BM_StoreBatchQuota(benchmark::State& state) {
  Fixture fixture(state.range(1) != 0 ? QuotaMode::kOpen : QuotaMode::kOff);
  if (state.range(1) != 0) (void)fixture.table->SetQuota("", kPoolBytes);
  ObjectTable& table = *fixture.table;
  const auto keys = Keys(0, static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    auto r = table.ReserveWrite(keys, kChunk, kWriter, AllocationMode::kLongestPrefix);
    benchmark::DoNotOptimize(r);
    table.FinishWrite(r->lease);
    table.Delete(keys, /*force=*/false);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_StoreBatchQuota)->ArgsProduct({{1, 16, 512}, {0, 1}})->ArgNames({"chunks", "quota"});

// Admits `keys` for kWriter.
void Admit(ObjectTable& table, const std::vector<ObjectKey>& keys) {
  auto r = table.ReserveWrite(keys, kChunk, kWriter, AllocationMode::kAllOrNothing);
  table.FinishWrite(r->lease);
}

// Locks a prefix then releases its lease (a lookup + retrieve).
void LockAndRelease(ObjectTable& table, const std::vector<ObjectKey>& keys) {
  ReadRequest request;
  request.keys = keys;
  request.owner = Owner::Instance(2);
  request.mode = ReadMode::kPrefix;
  auto acquired = table.AcquireRead(request);
  benchmark::DoNotOptimize(acquired);
  table.ReleaseRead(acquired->lease);
}

// Lock then release a prefix of `range(0)` resident chunks.
void BM_ReadLockUnlock(benchmark::State& state) {
  Fixture f;
  const auto keys = Keys(0, static_cast<std::size_t>(state.range(0)));
  Admit(*f.table, keys);
  for (auto _ : state) LockAndRelease(*f.table, keys);
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_ReadLockUnlock)->Arg(1)->Arg(16)->Arg(512);

// Many threads locking and releasing their own chunks: measures shard contention.
void BM_ReadLockUnlockContended(benchmark::State& state) {
  Fixture& f = Shared();
  const auto keys = Keys(1000 * static_cast<std::size_t>(state.thread_index()), 16);
  Admit(*f.table, keys);
  for (auto _ : state) LockAndRelease(*f.table, keys);
  state.SetItemsProcessed(state.iterations() * 16);
}
BENCHMARK(BM_ReadLockUnlockContended)->Threads(1)->Threads(2)->Threads(4);

// The warm restart's two halves for `range(0)` resident 64 KiB objects: the
// predecessor's Export (every shard locked, the LRU order) and the successor's
// allocator and table adoption of that image (docs/performance.md, "Warm restart").
struct HandoverFixture {
  explicit HandoverFixture(std::size_t objects) : keys(Keys(1 << 24, objects)) {
    for (std::size_t i = 0; i < keys.size(); i += 512) {
      const auto batch = std::span(keys).subspan(i, std::min<std::size_t>(512, keys.size() - i));
      auto r = from.table->ReserveWrite(batch, kSmallChunk, kWriter, AllocationMode::kAllOrNothing);
      from.table->FinishWrite(r->lease);
    }
  }
  static constexpr std::uint64_t kSmallChunk = 64 << 10;
  std::vector<ObjectKey> keys;
  Fixture from;
};

void BM_HandoverExport(benchmark::State& state) {
  HandoverFixture f(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(f.from.table->Export());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_HandoverExport)->Arg(196608)->Unit(benchmark::kMillisecond);

void BM_HandoverAdopt(benchmark::State& state) {
  HandoverFixture f(static_cast<std::size_t>(state.range(0)));
  const TableImage image = f.from.table->Export();
  const std::vector<alloc::SlabRecord> slabs = f.from.allocator->Slabs();
  std::vector<alloc::Offset> offsets;
  for (const AdoptedObject& object : image.resident) offsets.push_back(object.offset);
  for (auto _ : state) {
    state.PauseTiming();
    auto to = std::make_unique<Fixture>();
    state.ResumeTiming();
    (void)to->allocator->Adopt(slabs, offsets);
    benchmark::DoNotOptimize(to->table->Adopt(image));
    state.PauseTiming();
    to.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_HandoverAdopt)->Arg(196608)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lmcache::store

BENCHMARK_MAIN();
