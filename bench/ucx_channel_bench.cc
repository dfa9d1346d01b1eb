// UcxChannel's read rate between two channels of this process (two UCX
// workers, two progress threads), isolated from the server: one batch of
// `chunks` reads of `chunk` bytes, as a P2P load of one prompt is. Args:
// chunk bytes, chunks per batch, whether the requester checks each read's
// keyed digest (--p2p-verify-bytes: the owner digests, the requester checks;
// run with --benchmark_enable_random_interleaving=true
// --benchmark_repetitions=N to compare the two side by side). UCX_TLS in the environment picks the
// transport (tcp for what crosses nodes without RDMA). Counter: GB/s.
// Compare with `ucx_perftest -t ucp_am_bw` over the same transport
// (tools/p2p_bench.py does both in one run); docs/performance.md has both.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstring>
#include <future>
#include <new>
#include <vector>

#include "common/clock.h"
#include "fleet/ucx_channel.h"

namespace lmcache::fleet {
namespace {

constexpr std::size_t kPoolBytes = 512u << 20;

struct TouchedPool {
  TouchedPool() {
    void* mapped =
        mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) throw std::bad_alloc();
    std::memset(mapped, 1, kPoolBytes);  // faulted in, as a server's pre-faulted pool
    bytes = static_cast<std::byte*>(mapped);
  }
  ~TouchedPool() { munmap(bytes, kPoolBytes); }
  std::byte* bytes = nullptr;
};

void BM_ReadBatch(benchmark::State& state) {
  const auto chunk = static_cast<std::uint64_t>(state.range(0));
  const auto chunks = static_cast<std::uint64_t>(state.range(1));
  const bool verify = state.range(2) != 0;
  if (chunk * chunks > kPoolBytes) {
    state.SkipWithError("batch larger than the pool");
    return;
  }
  FleetDataKey key{};
  key.fill(7);
  TouchedPool owner_pool, requester_pool;
  const Clock& clock = SteadyClock::Instance();
  auto owner = UcxChannel::Create(owner_pool.bytes, kPoolBytes, &clock, key);
  auto requester = UcxChannel::Create(requester_pool.bytes, kPoolBytes, &clock, key,
                                      {.verify_bytes = verify});
  if (!owner.ok() || !requester.ok()) {
    state.SkipWithError("UCX channel did not start");
    return;
  }
  // The channel alone: every range is served (a server's guard asks its
  // lookup tasks; bench/ measures the transport).
  (*owner)->SetServeGuard([](std::int64_t, std::uint64_t, std::uint64_t) { return true; });
  auto peer = (*requester)->Connect((*owner)->Descriptor());
  if (!peer.ok()) {
    state.SkipWithError("connect failed");
    return;
  }
  std::vector<UcxRead> reads;
  for (std::uint64_t i = 0; i < chunks; ++i) reads.push_back({i * chunk, i * chunk, chunk});
  for (auto _ : state) {
    std::promise<Status> done;
    (*requester)->Read(*peer, reads, clock.NowMs() + 60'000,
                       [&done](Status s) { done.set_value(std::move(s)); });
    if (Status s = done.get_future().get(); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * chunk * chunks));
  (*requester)->Disconnect(*peer);
}
BENCHMARK(BM_ReadBatch)
    ->ArgNames({"chunk", "chunks", "verify"})
    ->Args({8 << 20, 16, 1})
    ->Args({8 << 20, 16, 0})
    ->Args({32 << 20, 8, 1})
    ->Args({32 << 20, 8, 0})
    ->Args({1 << 20, 128, 1})
    ->Args({1 << 20, 128, 0})
    ->Args({8 << 20, 64, 1})
    ->Args({8 << 20, 64, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace lmcache::fleet

BENCHMARK_MAIN();
