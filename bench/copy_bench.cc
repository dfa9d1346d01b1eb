// StreamCopy against glibc's memcpy, interleaved: each iteration copies one
// chunk with each, walking both through 256 MiB of source and destination so
// that neither finds its bytes in the caches (as a client's copies of KV
// chunks into the pool do not). Counters: GB/s of each and their ratio.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <new>

#include "common/stream_copy.h"

namespace lmcache {
namespace {

constexpr std::size_t kRingBytes = 256u << 20;

std::byte* TouchedBuffer(std::size_t size) {
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  std::memset(mapped, 1, size);
  return static_cast<std::byte*>(mapped);
}

void BM_StreamCopyVsMemcpy(benchmark::State& state) {
  const auto chunk = static_cast<std::size_t>(state.range(0));
  std::byte* src = TouchedBuffer(kRingBytes);
  std::byte* dst = TouchedBuffer(kRingBytes);
  const std::size_t slots = kRingBytes / chunk;
  std::size_t slot = 0;
  double memcpy_seconds = 0;
  double stream_seconds = 0;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const std::size_t a = slot++ % slots * chunk;
    const std::size_t b = slot++ % slots * chunk;
    const auto t0 = Clock::now();
    std::memcpy(dst + a, src + a, chunk);
    const auto t1 = Clock::now();
    StreamCopy(dst + b, src + b, chunk);
    const auto t2 = Clock::now();
    memcpy_seconds += std::chrono::duration<double>(t1 - t0).count();
    stream_seconds += std::chrono::duration<double>(t2 - t1).count();
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(chunk);
  state.counters["memcpy_GBps"] = bytes / memcpy_seconds / 1e9;
  state.counters["stream_GBps"] = bytes / stream_seconds / 1e9;
  state.counters["stream_vs_memcpy"] = memcpy_seconds / stream_seconds;
  munmap(src, kRingBytes);
  munmap(dst, kRingBytes);
}
BENCHMARK(BM_StreamCopyVsMemcpy)
    ->Arg(256 << 10)
    ->Arg(1 << 20)
    ->Arg(8 << 20)
    ->Arg(32 << 20)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lmcache

BENCHMARK_MAIN();
