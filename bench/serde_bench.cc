// The fp8 serde (docs/performance.md, "Compressed tiers"): the codec alone,
// and an fs tier's store and load of a batch with the serde on and off.
//   encode / decode  one object's fp8 cast from bfloat16, and back in place;
//   fs store         a batch of 16 objects written behind (page cache, no
//                    fsync: what the tier's own work costs, not the disk's);
//   fs load          the same batch read back, from the page cache (direct
//                    0: the copy, checksum and decode) or from the disk
//                    (direct 1: O_DIRECT reads, half the bytes under fp8).
// The objects hold bfloat16 values spread like attention keys and values (a
// normal of sigma 1, one in 97 an outlier to +-40). Throughput counts the
// objects' L1 bytes. Run with random interleaving and repetitions, so that
// on and off are measured side by side:
//   build/bench/serde_bench --benchmark_enable_random_interleaving=true
//     --benchmark_repetitions=9 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tier/fs/fs_adapter.h"
#include "tier/serde_adapter.h"

namespace lmcache::tier {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t kObjectBytes = 4u << 20;
constexpr std::size_t kBatch = 16;

struct AlignedBytes {
  explicit AlignedBytes(std::size_t n)
      : data(static_cast<std::byte*>(std::aligned_alloc(4096, n))), size(n) {}
  ~AlignedBytes() { std::free(data); }
  std::span<std::byte> span() const { return {data, size}; }
  std::byte* data;
  std::size_t size;
};

void FillKvLike(std::span<std::byte> out, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> outlier(-40.0f, 40.0f);
  for (std::size_t i = 0; i + 1 < out.size(); i += 2) {
    const float v = (i / 2) % 97 == 0 ? outlier(rng) : normal(rng);
    const auto bf16 = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);
    std::memcpy(out.data() + i, &bf16, 2);
  }
}

const AlignedBytes& KvObject() {
  static auto* object = [] {
    auto* o = new AlignedBytes(kObjectBytes);
    FillKvLike(o->span(), 1);
    return o;
  }();
  return *object;
}

void BM_Fp8Encode(benchmark::State& state) {
  const AlignedBytes& raw = KvObject();
  AlignedBytes out(kObjectBytes / 2);
  for (auto _ : state) {
    if (!EncodePayload(PayloadCodec::kFp8E4M3, ElementType::kBFloat16, raw.span(), out.span())
             .ok()) {
      state.SkipWithError("encode failed");
    }
    benchmark::DoNotOptimize(out.data);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kObjectBytes));
}

void BM_Fp8DecodeInPlace(benchmark::State& state) {
  const AlignedBytes& raw = KvObject();
  AlignedBytes encoded(kObjectBytes / 2), buffer(kObjectBytes);
  (void)EncodePayload(PayloadCodec::kFp8E4M3, ElementType::kBFloat16, raw.span(), encoded.span());
  for (auto _ : state) {
    std::memcpy(buffer.data, encoded.data, encoded.size);  // as a load leaves it
    DecodePayloadInPlace({PayloadCodec::kFp8E4M3, ElementType::kBFloat16, kObjectBytes},
                         buffer.span());
    benchmark::DoNotOptimize(buffer.data);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kObjectBytes));
}

// A directory, an fs adapter over it (wrapped in the serde when on) and a
// batch of objects; `fresh` gives each store batch keys of its own.
struct Tier {
  Tier(bool serde, bool direct) {
    spdlog::set_level(spdlog::level::warn);
    dir = fs::temp_directory_path() / ("lmcache_serde_bench_" + std::to_string(::getpid()) +
                                       (serde ? "_fp8" : "_raw") + (direct ? "_d" : ""));
    fs::remove_all(dir);
    FsAdapterConfig config;
    config.base_path = dir;
    config.use_odirect = direct;
    config.fsync = false;
    config.max_size_bytes = 2ull << 30;  // old batches go, so the page cache holds the rest
    auto fs_adapter = std::move(FsAdapter::Create(config)).value();
    directory.Bind([](const store::ObjectKey&, std::uint64_t) { return ElementType::kBFloat16; });
    if (serde) {
      adapter = std::make_unique<SerdeAdapter>(std::move(fs_adapter),
                                               SerdeConfig{PayloadCodec::kFp8E4M3}, &directory);
    } else {
      adapter = std::move(fs_adapter);
    }
    for (std::size_t i = 0; i < kBatch; ++i) {
      objects.push_back(std::make_unique<AlignedBytes>(kObjectBytes));
      FillKvLike(objects.back()->span(), static_cast<unsigned>(i + 2));
      out.push_back(std::make_unique<AlignedBytes>(kObjectBytes));
    }
    loaded_keys = Keys(0);
    if (!Store(loaded_keys)) std::abort();
    // Locked, so the store benchmark's batches never evict them.
    for (bool held : adapter->LookupAndLock(loaded_keys)) {
      if (!held) std::abort();
    }
    for (std::size_t i = 0; i < kBatch; ++i) reads.push_back({&loaded_keys[i], out[i]->span()});
  }
  ~Tier() { fs::remove_all(dir); }

  std::vector<store::ObjectKey> Keys(std::uint64_t batch) const {
    std::vector<store::ObjectKey> keys(kBatch);
    for (std::size_t i = 0; i < kBatch; ++i) {
      keys[i].model_name = "meta-llama/Llama-3.1-8B-Instruct";
      std::memcpy(keys[i].chunk_hash.data(), &batch, sizeof(batch));
      keys[i].chunk_hash[8] = static_cast<std::uint8_t>(i);
    }
    return keys;
  }
  bool Store(const std::vector<store::ObjectKey>& keys) {
    std::vector<L2Write> writes;
    for (std::size_t i = 0; i < kBatch; ++i) writes.push_back({&keys[i], objects[i]->span()});
    for (const Status& s : adapter->Store(writes)) {
      if (!s.ok()) return false;
    }
    return true;
  }

  fs::path dir;
  ElementTypeDirectory directory;
  std::unique_ptr<L2Adapter> adapter;
  std::vector<std::unique_ptr<AlignedBytes>> objects, out;
  std::vector<store::ObjectKey> loaded_keys;
  std::vector<L2Read> reads;
  std::uint64_t next_batch = 1;
};

Tier& TierFor(bool serde, bool direct = false) {
  static Tier* tiers[2][2] = {};
  Tier*& tier = tiers[serde][direct];
  if (tier == nullptr) tier = new Tier(serde, direct);
  return *tier;
}

void BM_FsStore(benchmark::State& state) {
  Tier& tier = TierFor(state.range(0) != 0);
  for (auto _ : state) {
    if (!tier.Store(tier.Keys(tier.next_batch++))) state.SkipWithError("a store failed");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBatch * kObjectBytes));
}

void BM_FsLoad(benchmark::State& state) {
  Tier& tier = TierFor(state.range(0) != 0, state.range(1) != 0);
  for (auto _ : state) {
    for (L2LoadOutcome o : tier.adapter->Load(tier.reads)) {
      if (o != L2LoadOutcome::kLoaded) state.SkipWithError("a load failed");
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBatch * kObjectBytes));
}

BENCHMARK(BM_Fp8Encode)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Fp8DecodeInPlace)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FsStore)->ArgName("fp8")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FsLoad)
    ->ArgNames({"fp8", "direct"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lmcache::tier

BENCHMARK_MAIN();
