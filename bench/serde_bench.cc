// The serdes (docs/performance.md, "Compressed tiers"): the codecs alone,
// and a tier's store and load of a batch with each serde and without, for
// fs always, and for resp and s3 when the environment names a server:
//   LMC_REDIS_URL  a Redis for the resp rows (redis://host:port, unix:///path)
//   LMC_S3_ENV     an s3.env as tools/ceph_s3.sh writes it (S3_ENDPOINT,
//                  S3_REGION, S3_ACCESS_KEY, S3_SECRET_KEY) with a bucket
//                  named lmc-bench, for the s3 rows
// (rows without their server end with an error that says so).
// `serde` 0 stores raw, 1 fp8 (e4m3), 2 lossless.
//   encode / decode  one object's encoding from bfloat16, and its decoding;
//   fs store         a batch of 16 objects written behind (page cache, no
//                    fsync: what the tier's own work costs, not the disk's);
//   fs load          the same batch read back, from the page cache (direct
//                    0: the copy, checksum and decode) or from the disk
//                    (direct 1: O_DIRECT reads, half the bytes under fp8).
// The objects are [2, layers, tokens, hidden] bfloat16 (K plane, then V),
// spread like attention keys and values: each channel of a layer has its
// own scale (lognormal, sigma 0.7), keys a per-channel offset and one
// channel in 64 twelve times larger (the outlier channels keys have).
// Throughput counts the objects' L1 bytes. Run with random interleaving and repetitions, so that
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

#include <fstream>
#include <map>

#include "tier/fs/fs_adapter.h"
#if LMC_L2_RESP
#include "tier/resp/resp_adapter.h"
#endif
#if LMC_L2_S3
#include "tier/s3/s3_adapter.h"
#endif
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
  constexpr std::size_t kHidden = 1024, kTokens = 256;
  const std::size_t rows = out.size() / 2 / kHidden;  // (plane, layer, token) rows
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::lognormal_distribution<float> spread(0.0f, 0.7f);
  std::vector<float> scale(kHidden), offset(kHidden);
  for (std::size_t row = 0; row < rows; ++row) {
    const bool keys = row < rows / 2;
    if (row % kTokens == 0) {  // a new layer: its channels' scales
      for (std::size_t h = 0; h < kHidden; ++h) {
        scale[h] = spread(rng) * (keys && h % 64 == 3 ? 12.0f : 1.0f);
        offset[h] = keys ? 0.5f * normal(rng) : 0.0f;
      }
    }
    for (std::size_t h = 0; h < kHidden; ++h) {
      const float v = offset[h] + scale[h] * normal(rng);
      const auto bf16 = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);
      std::memcpy(out.data() + 2 * (row * kHidden + h), &bf16, 2);
    }
  }
}

PayloadCodec CodecOf(std::int64_t serde) {
  return serde == 2   ? PayloadCodec::kLossless
         : serde == 1 ? PayloadCodec::kFp8E4M3
                      : PayloadCodec::kRaw;
}

const AlignedBytes& KvObject() {
  static auto* object = [] {
    auto* o = new AlignedBytes(kObjectBytes);
    FillKvLike(o->span(), 1);
    return o;
  }();
  return *object;
}

void BM_Encode(benchmark::State& state) {
  const PayloadCodec codec = CodecOf(state.range(0));
  const AlignedBytes& raw = KvObject();
  AlignedBytes out(*EncodedBytesBound(codec, ElementType::kBFloat16, kObjectBytes));
  std::uint64_t stored = 0;
  for (auto _ : state) {
    auto n = EncodePayload(codec, ElementType::kBFloat16, raw.span(), out.span());
    if (!n.ok()) state.SkipWithError("encode failed");
    stored = n.ok() ? *n : 0;
    benchmark::DoNotOptimize(out.data);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kObjectBytes));
  state.counters["stored_fraction"] = static_cast<double>(stored) / kObjectBytes;
}

void BM_Decode(benchmark::State& state) {
  const PayloadCodec codec = CodecOf(state.range(0));
  const AlignedBytes& raw = KvObject();
  AlignedBytes encoded(*EncodedBytesBound(codec, ElementType::kBFloat16, kObjectBytes));
  AlignedBytes buffer(kObjectBytes);
  const std::uint64_t n = *EncodePayload(codec, ElementType::kBFloat16, raw.span(), encoded.span());
  for (auto _ : state) {
    std::memcpy(buffer.data, encoded.data, n);  // as a load leaves it
    if (!DecodePayload({codec, ElementType::kBFloat16, kObjectBytes}, n, buffer.span()).ok()) {
      state.SkipWithError("decode failed");
    }
    benchmark::DoNotOptimize(buffer.data);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kObjectBytes));
}

enum class Backend { kFs, kFsDirect, kResp, kS3 };

// The adapter of `backend` with room for 2 GiB (old batches go: the page
// cache, Redis's memory and the gateway's store hold the rest), or why
// there is none. `tag` keeps each serde's objects apart.
Result<std::unique_ptr<L2Adapter>> MakeBackend(Backend backend, const std::string& tag,
                                               const fs::path& dir) {
  constexpr std::uint64_t kRoom = 2ull << 30;
  switch (backend) {
    case Backend::kFs:
    case Backend::kFsDirect: {
      FsAdapterConfig config;
      config.base_path = dir;
      config.use_odirect = backend == Backend::kFsDirect;
      config.fsync = false;
      config.max_size_bytes = kRoom;
      LMC_ASSIGN_OR_RETURN(auto adapter, FsAdapter::Create(config));
      return std::unique_ptr<L2Adapter>(std::move(adapter));
    }
    case Backend::kResp: {
#if LMC_L2_RESP
      const char* url = std::getenv("LMC_REDIS_URL");
      if (url == nullptr) return Status(ErrorCode::kNotFound, "LMC_REDIS_URL is not set");
      RespAdapterConfig config;
      config.urls = {url};
      config.key_prefix = "serde-bench:" + tag + ":";
      LMC_ASSIGN_OR_RETURN(auto adapter, RespAdapter::Create(config));
      return std::unique_ptr<L2Adapter>(std::move(adapter));
#else
      return Status(ErrorCode::kNotSupported, "built without the resp adapter");
#endif
    }
    case Backend::kS3: {
#if LMC_L2_S3
      const char* path = std::getenv("LMC_S3_ENV");
      if (path == nullptr) return Status(ErrorCode::kNotFound, "LMC_S3_ENV is not set");
      std::map<std::string, std::string> env;
      std::ifstream file(path);
      for (std::string line; std::getline(file, line);) {
        const auto eq = line.find('=');
        if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
      }
      S3AdapterConfig config;
      const std::string endpoint = env["S3_ENDPOINT"];
      const auto scheme_end = endpoint.find("://");
      if (scheme_end == std::string::npos) return Status(ErrorCode::kNotFound, "no S3_ENDPOINT");
      config.client.scheme = endpoint.substr(0, scheme_end);
      config.client.host = endpoint.substr(scheme_end + 3);
      config.client.bucket = "lmc-bench";
      config.client.virtual_hosted = false;
      config.client.region = env["S3_REGION"];
      config.client.credentials = {env["S3_ACCESS_KEY"], env["S3_SECRET_KEY"], ""};
      config.client.request_timeout = std::chrono::seconds(60);
      config.key_prefix = "serde-bench/" + tag + "/";
      config.max_capacity_bytes = kRoom;
      config.max_listed_objects = 0;
      LMC_ASSIGN_OR_RETURN(auto adapter, S3Adapter::Create(config));
      return std::unique_ptr<L2Adapter>(std::move(adapter));
#else
      return Status(ErrorCode::kNotSupported, "built without the s3 adapter");
#endif
    }
  }
  return Status(ErrorCode::kInternal, "no such backend");
}

// A tier (wrapped in the serde when on) and a batch of objects; each store
// batch gets keys of its own.
struct Tier {
  Tier(std::int64_t serde, Backend backend) {
    spdlog::set_level(spdlog::level::warn);
    const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(serde) + "_" +
                            std::to_string(static_cast<int>(backend));
    dir = fs::temp_directory_path() / ("lmcache_serde_bench_" + tag);
    fs::remove_all(dir);
    auto made = MakeBackend(backend, tag, dir);
    if (!made.ok()) {
      error = made.status().message();
      return;
    }
    auto inner = std::move(made).value();
    directory.Bind([](const store::ObjectKey&, std::uint64_t) { return ElementType::kBFloat16; });
    if (serde != 0) {
      adapter =
          std::make_unique<SerdeAdapter>(std::move(inner), SerdeConfig{CodecOf(serde)}, &directory);
    } else {
      adapter = std::move(inner);
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
  ~Tier() {
    adapter.reset();
    fs::remove_all(dir);
  }

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
  std::string error;  // why the backend is not there (the rest is then empty)
  ElementTypeDirectory directory;
  std::unique_ptr<L2Adapter> adapter;
  std::vector<std::unique_ptr<AlignedBytes>> objects, out;
  std::vector<store::ObjectKey> loaded_keys;
  std::vector<L2Read> reads;
  std::uint64_t next_batch = 1;
};

Tier* tiers[3][4] = {};

// The tiers' directories go at exit (each holds up to 2 GiB).
void RemoveTiers() {
  for (auto& by_direct : tiers) {
    for (Tier*& tier : by_direct) {
      delete tier;
      tier = nullptr;
    }
  }
}

Tier& TierFor(std::int64_t serde, Backend backend) {
  static const bool cleanup = std::atexit(RemoveTiers) == 0;
  (void)cleanup;
  Tier*& tier = tiers[serde][static_cast<int>(backend)];
  if (tier == nullptr) tier = new Tier(serde, backend);
  return *tier;
}

void Store(benchmark::State& state, Backend backend) {
  Tier& tier = TierFor(state.range(0), backend);
  if (!tier.error.empty()) return state.SkipWithError(tier.error.c_str());
  for (auto _ : state) {
    if (!tier.Store(tier.Keys(tier.next_batch++))) state.SkipWithError("a store failed");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBatch * kObjectBytes));
}

void Load(benchmark::State& state, Backend backend) {
  Tier& tier = TierFor(state.range(0), backend);
  if (!tier.error.empty()) return state.SkipWithError(tier.error.c_str());
  for (auto _ : state) {
    for (L2LoadOutcome o : tier.adapter->Load(tier.reads)) {
      if (o != L2LoadOutcome::kLoaded) state.SkipWithError("a load failed");
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBatch * kObjectBytes));
}

BENCHMARK(BM_Encode)->ArgName("serde")->Arg(1)->Arg(2)->UseRealTime()->Unit(
    benchmark::kMillisecond);
BENCHMARK(BM_Decode)->ArgName("serde")->Arg(1)->Arg(2)->UseRealTime()->Unit(
    benchmark::kMillisecond);
void BM_FsStore(benchmark::State& state) { Store(state, Backend::kFs); }
void BM_FsLoad(benchmark::State& state) {
  Load(state, state.range(1) != 0 ? Backend::kFsDirect : Backend::kFs);
}
void BM_RespStore(benchmark::State& state) { Store(state, Backend::kResp); }
void BM_RespLoad(benchmark::State& state) { Load(state, Backend::kResp); }
void BM_S3Store(benchmark::State& state) { Store(state, Backend::kS3); }
void BM_S3Load(benchmark::State& state) { Load(state, Backend::kS3); }

BENCHMARK(BM_FsStore)
    ->ArgName("serde")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FsLoad)
    ->ArgNames({"serde", "direct"})
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RespStore)
    ->ArgName("serde")
    ->DenseRange(0, 2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RespLoad)
    ->ArgName("serde")
    ->DenseRange(0, 2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_S3Store)
    ->ArgName("serde")
    ->DenseRange(0, 2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_S3Load)->ArgName("serde")->DenseRange(0, 2)->UseRealTime()->Unit(
    benchmark::kMillisecond);

}  // namespace
}  // namespace lmcache::tier

BENCHMARK_MAIN();
