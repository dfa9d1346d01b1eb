// The fs L2 adapter's loads, three ways (docs/performance.md, "L2 fs loads"):
//   sync   one thread reads the batch's objects one after another (a single
//          prefetch before io_uring: queue depth 1);
//   pool   eight threads of a pool split the batch (the most the prefetch
//          thread pool gives when eight requests load at once);
//   uring  one thread submits the whole batch to io_uring (queue depth = batch);
//   pool_uring  the pool's eight threads each submit their share to io_uring
//          (eight prefetches at once, each through the ring).
// Arguments: object KiB, O_DIRECT (0: the page cache holds the files, so the
// figure is the copy; 1: every read goes to the disk). A batch is 32 objects,
// a prefetch of 32 chunks. Run with random interleaving and repetitions, so
// the three ways are measured side by side:
//   build/bench/fs_bench --benchmark_enable_random_interleaving=true
//     --benchmark_repetitions=9 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <latch>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "tier/fs/fs_adapter.h"

namespace lmcache::tier {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t kBatch = 32;
constexpr unsigned kPoolThreads = 8;

enum class Way { kSync, kPool, kUring, kPoolUring };

struct AlignedBytes {
  explicit AlignedBytes(std::size_t n)
      : data(static_cast<std::byte*>(std::aligned_alloc(4096, n))), size(n) {
    for (std::size_t i = 0; i < n; ++i) data[i] = std::byte(static_cast<unsigned char>(i * 31));
  }
  ~AlignedBytes() { std::free(data); }
  std::byte* data;
  std::size_t size;
};

// One directory of kBatch stored objects per (size, direct), and an adapter
// of each engine over it.
struct Objects {
  Objects(std::size_t object_bytes, bool direct) {
    spdlog::set_level(spdlog::level::warn);  // the adapters' start-up lines would interleave with JSON
    dir = fs::temp_directory_path() / ("lmcache_fs_bench_" + std::to_string(::getpid()) + "_" +
                                       std::to_string(object_bytes) + (direct ? "_d" : ""));
    fs::remove_all(dir);
    FsAdapterConfig config;
    config.base_path = dir;
    config.use_odirect = direct;
    config.fsync = false;
    config.io_engine = FsIoEngine::kSync;
    sync = std::move(FsAdapter::Create(config)).value();
    config.io_engine = FsIoEngine::kUring;
    uring = std::move(FsAdapter::Create(config)).value();
    AlignedBytes payload(object_bytes);
    for (std::size_t i = 0; i < kBatch; ++i) {
      store::ObjectKey key;
      key.model_name = "meta-llama/Llama-3.1-8B-Instruct";
      key.chunk_hash[0] = static_cast<std::uint8_t>(i);
      key.chunk_hash[1] = static_cast<std::uint8_t>(i >> 8);
      keys.push_back(key);
    }
    for (const store::ObjectKey& key : keys) {
      const std::vector<L2Write> write = {{&key, {payload.data, payload.size}}};
      if (!sync->Store(write)[0].ok()) std::abort();
    }
    // The uring adapter indexed the directory before the stores: reopen it.
    uring = std::move(FsAdapter::Create(config)).value();
    for (std::size_t i = 0; i < kBatch; ++i) out.push_back(std::make_unique<AlignedBytes>(object_bytes));
    for (std::size_t i = 0; i < kBatch; ++i) reads.push_back({&keys[i], {out[i]->data, out[i]->size}});
  }
  ~Objects() { fs::remove_all(dir); }

  fs::path dir;
  std::unique_ptr<FsAdapter> sync, uring;
  std::vector<store::ObjectKey> keys;
  std::vector<std::unique_ptr<AlignedBytes>> out;
  std::vector<L2Read> reads;
};

Objects& ObjectsFor(std::size_t object_bytes, bool direct) {
  static auto* all = new std::map<std::pair<std::size_t, bool>, std::unique_ptr<Objects>>();
  auto& objects = (*all)[{object_bytes, direct}];
  if (!objects) objects = std::make_unique<Objects>(object_bytes, direct);
  return *objects;
}

ThreadPool& Pool() {
  static auto* pool = new ThreadPool("bench-pool", kPoolThreads, FairQueueLimits{});
  return *pool;
}

bool LoadedAll(const std::vector<L2LoadOutcome>& outcomes) {
  for (L2LoadOutcome o : outcomes) {
    if (o != L2LoadOutcome::kLoaded) return false;
  }
  return true;
}

void LoadBatch(benchmark::State& state, Way way) {
  const auto object_bytes = static_cast<std::size_t>(state.range(0)) << 10;
  Objects& objects = ObjectsFor(object_bytes, state.range(1) != 0);
  const std::span<const L2Read> reads(objects.reads);
  for (auto _ : state) {
    bool ok = true;
    if (way == Way::kSync) {
      ok = LoadedAll(objects.sync->Load(reads));
    } else if (way == Way::kUring) {
      ok = LoadedAll(objects.uring->Load(reads));
    } else {
      FsAdapter& adapter = way == Way::kPool ? *objects.sync : *objects.uring;
      std::latch done(kPoolThreads);
      std::atomic<bool> all{true};
      for (unsigned t = 0; t < kPoolThreads; ++t) {
        const std::size_t per = kBatch / kPoolThreads;
        Pool().Submit(t, 0, [&, t, per] {
          if (!LoadedAll(adapter.Load(reads.subspan(t * per, per)))) all = false;
          done.count_down();
        });
      }
      done.wait();
      ok = all;
    }
    if (!ok) state.SkipWithError("a load failed");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBatch * object_bytes));
}

void BM_FsLoadSync(benchmark::State& state) { LoadBatch(state, Way::kSync); }
void BM_FsLoadPool(benchmark::State& state) { LoadBatch(state, Way::kPool); }
void BM_FsLoadUring(benchmark::State& state) { LoadBatch(state, Way::kUring); }
void BM_FsLoadPoolUring(benchmark::State& state) { LoadBatch(state, Way::kPoolUring); }

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"KiB", "direct"})->UseRealTime()->Unit(benchmark::kMillisecond);
  for (int direct : {0, 1}) {
    for (int kib : {256, 4096}) b->Args({kib, direct});
  }
}
BENCHMARK(BM_FsLoadSync)->Apply(Args);
BENCHMARK(BM_FsLoadPool)->Apply(Args);
BENCHMARK(BM_FsLoadUring)->Apply(Args);
BENCHMARK(BM_FsLoadPoolUring)->Apply(Args);

}  // namespace
}  // namespace lmcache::tier

BENCHMARK_MAIN();
