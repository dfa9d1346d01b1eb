// Codec and hashing micro-benchmarks: decoding the key of a long lookup, and
// BLAKE3 (ours against the b3sum tool on the same bytes).
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "common/blake3.h"
#include "common/msgpack_codec.h"
#include "protocol/wire_codec.h"
#include "worker/chunk_hasher.h"
#include "worker/token_hasher.h"

namespace lmcache {
namespace {

// Token ids drawn from: 0 = Llama 3's whole vocabulary, uniformly (uint16 and
// uint32 items mixed at random: the decoder's worst case); 1 = ids of 2^24 and
// more (what lmcache-bench sends: all uint32); 2 = the first 32000 ids with
// one in eight a fixint (digits and punctuation), closer to English text.
std::uint32_t TokenId(std::mt19937& rng, std::int64_t mix) {
  if (mix == 1) return (1u << 24) + rng() % 1000000;
  if (mix == 2) return rng() % 8 == 0 ? rng() % 128 : 128 + rng() % 31872;
  return rng() % 128256;
}

std::string LookupKeyFrame(std::size_t tokens, std::int64_t mix = 0) {
  IpcKey key;
  key.model_name = "meta-llama/Llama-3.1-8B-Instruct";
  key.worker_id.reset();
  std::mt19937 rng(1);
  for (std::size_t i = 0; i < tokens; ++i) key.token_ids.push_back(TokenId(rng, mix));
  key.end = static_cast<std::int64_t>(tokens);
  key.request_id = "bench";
  return protocol::EncodeIpcKey(key);
}

void BM_DecodeLookupKey(benchmark::State& state) {
  const std::string frame =
      LookupKeyFrame(static_cast<std::size_t>(state.range(0)), state.range(1));
  for (auto _ : state) {
    auto key = protocol::DecodeIpcKey(frame);
    benchmark::DoNotOptimize(key);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(frame.size()));
}
BENCHMARK(BM_DecodeLookupKey)
    ->ArgsProduct({{4096, 131072}, {0, 1, 2}})
    ->ArgNames({"tokens", "mix"})
    ->Unit(benchmark::kMicrosecond);

// What a client pays before a lookup of `tokens` tokens leaves it.
void BM_EncodeLookupKey(benchmark::State& state) {
  IpcKey key;
  key.model_name = "meta-llama/Llama-3.1-8B-Instruct";
  std::mt19937 rng(1);
  for (std::int64_t i = 0; i < state.range(0); ++i) key.token_ids.push_back(TokenId(rng, state.range(1)));
  key.end = state.range(0);
  key.request_id = "bench";
  for (auto _ : state) {
    std::string frame = protocol::EncodeIpcKey(key);
    benchmark::DoNotOptimize(frame);
  }
}
BENCHMARK(BM_EncodeLookupKey)
    ->ArgsProduct({{4096, 131072}, {0, 1, 2}})
    ->ArgNames({"tokens", "mix"})
    ->Unit(benchmark::kMicrosecond);

void BM_HashPromptChunks(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint32_t> ids(tokens);
  std::mt19937 rng(2);
  for (auto& t : ids) t = rng() % 128256;
  for (auto _ : state) {
    auto hashes = worker::HashChunks(ids, 256, 0, tokens / 256, worker::NoneHash());
    benchmark::DoNotOptimize(hashes);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(tokens * 4));
}
BENCHMARK(BM_HashPromptChunks)->Arg(131072)->Unit(benchmark::kMicrosecond);

// Nanoseconds per chunk of a 32768-token prompt through the ChunkHasher at
// one chunk size (range 0): range 1 = 0 hashes every chunk afresh (a cache of
// 0 bytes), 1 = every chunk a hit in a warm cache. Where hits cost more than
// BLAKE3, the hasher should not consult its cache (worker/chunk_hasher.h).
void BM_ChunkHasherPerChunk(benchmark::State& state) {
  const auto chunk = static_cast<std::size_t>(state.range(0));
  const bool cached = state.range(1) == 1;
  constexpr std::size_t kTokens = 32768;
  std::vector<std::uint32_t> ids(kTokens);
  std::mt19937 rng(4);
  for (auto& t : ids) t = rng() % 128256;
  worker::ChunkHasher hasher(cached ? 256u << 20 : 0);
  const std::size_t count = kTokens / chunk;
  benchmark::DoNotOptimize(hasher.Hashes(ids, chunk, count));  // warms the cache
  for (auto _ : state) benchmark::DoNotOptimize(hasher.Hashes(ids, chunk, count));
  state.counters["ns_per_chunk"] =
      benchmark::Counter(static_cast<double>(count) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ChunkHasherPerChunk)
    ->ArgsProduct({{1, 4, 16, 32, 64, 256}, {0, 1}})
    ->ArgNames({"chunk", "cached"})
    ->Unit(benchmark::kMicrosecond);

// Microseconds to hash a 131072-token prompt at chunk size 256 whose every
// chunk the cache holds, among 48 such prompts (about 26 MiB of entries,
// more than the CPU's caches): each is cold again by its turn, as a prompt
// is between a server's lookups (the lookup's "hash" stage).
void BM_ChunkHasherColdPrompt(benchmark::State& state) {
  constexpr std::size_t kTokens = 131072;
  constexpr std::size_t kPrompts = 48;
  std::vector<std::vector<std::uint32_t>> prompts(kPrompts, std::vector<std::uint32_t>(kTokens));
  std::mt19937 rng(5);
  for (auto& prompt : prompts) {
    for (auto& t : prompt) t = rng() % 128256;
  }
  worker::ChunkHasher hasher(256u << 20);
  for (const auto& prompt : prompts)
    benchmark::DoNotOptimize(hasher.Hashes(prompt, 256, kTokens / 256));
  std::size_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(hasher.Hashes(prompts[next], 256, kTokens / 256));
    next = (next + 1) % kPrompts;
  }
  if (hasher.Stats().misses != kPrompts * kTokens / 256) state.SkipWithError("a chunk missed");
}
BENCHMARK(BM_ChunkHasherColdPrompt)->Unit(benchmark::kMicrosecond);

std::vector<std::uint8_t> RandomBytes(std::size_t size) {
  std::vector<std::uint8_t> bytes(size);
  std::mt19937_64 rng(3);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
  return bytes;
}

void BM_Blake3(benchmark::State& state) {
  const auto bytes = RandomBytes(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(Blake3(bytes));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Blake3)->Arg(1024)->Arg(512 * 1024)->Arg(16 << 20);

// b3sum over the same bytes from a file in /dev/shm (page cache, no disk), one
// thread as ours: seconds per run include its process start, so compare the
// large size. Reported as a time per iteration and bytes per second.
void BM_B3sumTool(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const std::string path = "/dev/shm/lmcache_b3sum_bench_" + std::to_string(getpid());
  {
    const auto bytes = RandomBytes(size);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  const std::string command = "b3sum --num-threads 1 --no-names " + path + " > /dev/null";
  for (auto _ : state) {
    if (std::system(command.c_str()) != 0) {
      state.SkipWithError("b3sum not installed (apt-get install b3sum)");
      break;
    }
  }
  std::filesystem::remove(path);
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_B3sumTool)->Arg(16 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace lmcache

BENCHMARK_MAIN();
