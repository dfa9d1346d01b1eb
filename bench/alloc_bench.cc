// Allocator micro-benchmarks: single allocate/free, batches, and contention.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "alloc/slab_allocator.h"

namespace lmcache::alloc {
namespace {

constexpr std::uint64_t kPoolBytes = 4ull << 30;  // address space only: never touched

// The allocator never touches the span, so a reserved-but-unbacked range works.
std::span<std::byte> FakeSpan() {
  static std::byte* const base = [] {
    void* p = std::aligned_alloc(1 << 21, 1 << 21);  // a real, aligned base address
    return static_cast<std::byte*>(p);
  }();
  return {base, static_cast<std::size_t>(kPoolBytes)};
}

std::unique_ptr<SlabAllocator>& Shared() {
  static std::unique_ptr<SlabAllocator> allocator =
      std::move(SlabAllocator::Create(FakeSpan(), SlabAllocatorConfig{})).value();
  return allocator;
}

void BM_AllocateFree(benchmark::State& state) {
  auto allocator = std::move(SlabAllocator::Create(FakeSpan(), SlabAllocatorConfig{})).value();
  const auto size = static_cast<std::uint64_t>(state.range(0));
  // Keep one object live so the class (and its slab) persists between iterations.
  auto keep = allocator->Allocate(size);
  for (auto _ : state) {
    auto offset = allocator->Allocate(size);
    benchmark::DoNotOptimize(offset);
    (void)allocator->Free(*offset);
  }
  (void)allocator->Free(*keep);
}
BENCHMARK(BM_AllocateFree)->Arg(256 << 10)->Arg(2 << 20)->Arg(32 << 20);

void BM_AllocateBatchFreeBatch(benchmark::State& state) {
  auto allocator = std::move(SlabAllocator::Create(FakeSpan(), SlabAllocatorConfig{})).value();
  const auto count = static_cast<std::size_t>(state.range(0));
  constexpr std::uint64_t kChunk = 2 << 20;  // a 256-token chunk of a 1B-class model
  for (auto _ : state) {
    auto offsets = allocator->AllocateBatch(kChunk, count);
    benchmark::DoNotOptimize(offsets);
    (void)allocator->FreeBatch(*offsets);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(count));
}
BENCHMARK(BM_AllocateBatchFreeBatch)->Arg(16)->Arg(128)->Arg(512);

void BM_AllocateFreeContended(benchmark::State& state) {
  SlabAllocator& allocator = *Shared();
  for (auto _ : state) {
    auto offset = allocator.Allocate(1 << 20);
    benchmark::DoNotOptimize(offset);
    (void)allocator.Free(*offset);
  }
}
BENCHMARK(BM_AllocateFreeContended)->Threads(1)->Threads(2)->Threads(4);

}  // namespace
}  // namespace lmcache::alloc

BENCHMARK_MAIN();
