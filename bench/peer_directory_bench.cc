// The peer directory at fleet scale (issue 43's targets): 100 peers x 1 M
// resident chunks each. Memory of the filters (the "filter_MiB" counter),
// the time to name the peers that may hold one chunk (every peer asked),
// a 64-chunk prompt's prefixes, the last-copy bias's window of 256, one
// peer's stored event applied, and a departed peer forgotten.
// docs/performance.md ("Peer directory") quotes it.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "fleet/peer_directory.h"

namespace lmcache::fleet {
namespace {

constexpr PeerId kPeers = 100;
constexpr std::uint64_t kChunksPerPeer = 1'000'000;

// Peer p holds chunks Id(p, 0 .. kChunksPerPeer): distinct across peers
// (the worst case for memory: no two peers share a chunk).
ChunkId Id(PeerId peer, std::uint64_t i) {
  std::uint64_t x = (peer << 40) ^ i ^ 0x9e3779b97f4a7c15ull;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

PeerDirectory& Full() {
  static PeerDirectory* directory = [] {
    auto* d = new PeerDirectory();
    std::vector<ChunkId> batch(1000);
    for (PeerId p = 1; p <= kPeers; ++p) {
      d->AddPeer(p, kChunksPerPeer);
      std::uint64_t seq = 0;
      for (std::uint64_t i = 0; i < kChunksPerPeer; i += batch.size()) {
        for (std::size_t j = 0; j < batch.size(); ++j) batch[j] = Id(p, i + j);
        d->Apply(p, 1, ++seq, DirectoryChange::kStored, batch);
      }
    }
    return d;
  }();
  return *directory;
}

void Counters(benchmark::State& state) {
  const P2pDirectoryStats s = Full().Stats();
  state.counters["filter_MiB"] = static_cast<double>(s.memory_bytes) / (1 << 20);
  state.counters["chunks"] = static_cast<double>(s.chunks);
  state.counters["stale_peers"] = static_cast<double>(s.stale_peers);
}

// One chunk that one peer holds, every peer's filter asked.
void BM_DirectoryMayHold(benchmark::State& state) {
  PeerDirectory& d = Full();
  std::mt19937_64 random(1);
  std::uint64_t holders = 0;
  for (auto _ : state) {
    const PeerId p = 1 + random() % kPeers;
    const auto named = d.MayHold(Id(p, random() % kChunksPerPeer));
    holders += named.size();
    benchmark::DoNotOptimize(named.data());
  }
  state.counters["holders_per_chunk"] =
      static_cast<double>(holders) / static_cast<double>(state.iterations());
  Counters(state);
}
BENCHMARK(BM_DirectoryMayHold)->Repetitions(5)->ReportAggregatesOnly(true);

// A chunk nobody holds: what false positives cost (named peers per miss).
void BM_DirectoryMayHoldMiss(benchmark::State& state) {
  PeerDirectory& d = Full();
  std::mt19937_64 random(2);
  std::uint64_t named_total = 0;
  for (auto _ : state) {
    const auto named = d.MayHold(Id(kPeers + 1 + random() % 1000, random()));
    named_total += named.size();
    benchmark::DoNotOptimize(named.data());
  }
  state.counters["false_positive_peers_per_miss"] =
      static_cast<double>(named_total) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_DirectoryMayHoldMiss)->Repetitions(5)->ReportAggregatesOnly(true);

// A 64-chunk prompt one peer holds whole: its prefixes, per chunk.
void BM_DirectoryPrefixes64(benchmark::State& state) {
  PeerDirectory& d = Full();
  std::mt19937_64 random(3);
  std::vector<ChunkId> prompt(64);
  for (auto _ : state) {
    const PeerId p = 1 + random() % kPeers;
    const std::uint64_t first = random() % (kChunksPerPeer - 64);
    for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = Id(p, first + i);
    const auto prefixes = d.Prefixes(prompt);
    benchmark::DoNotOptimize(prefixes.data());
  }
  state.SetItemsProcessed(state.iterations() * 64);  // items: chunks
}
BENCHMARK(BM_DirectoryPrefixes64)->Repetitions(5)->ReportAggregatesOnly(true);

// The evictor's last-copy bias (issue 43, section 3): a window of 256 of
// our eviction candidates, half held by one of the peers, half by none;
// whether a peer keeps each (every peer in step consulted), per chunk.
void BM_DirectoryKeptElsewhere256(benchmark::State& state) {
  PeerDirectory& d = Full();
  std::mt19937_64 random(5);
  std::vector<ChunkId> window(256);
  std::uint64_t kept = 0;
  for (auto _ : state) {
    for (std::size_t i = 0; i < window.size(); ++i) {
      window[i] = i % 2 == 0 ? Id(1 + random() % kPeers, random() % kChunksPerPeer)
                             : Id(kPeers + 1 + random() % 1000, random());
    }
    const std::vector<bool> out = d.KeptElsewhere(window, /*own_incarnation=*/7);
    kept += static_cast<std::uint64_t>(std::count(out.begin(), out.end(), true));
  }
  state.SetItemsProcessed(state.iterations() * 256);  // items: chunks
  state.counters["kept_elsewhere_fraction"] =
      static_cast<double>(kept) / static_cast<double>(state.iterations() * 256);
}
BENCHMARK(BM_DirectoryKeptElsewhere256)->Repetitions(5)->ReportAggregatesOnly(true);

// One stored event of one chunk (vLLM's BlockStored per chunk), peers in
// turn, into the full directory (each peer's filter at its sized load).
void BM_DirectoryApplyStored(benchmark::State& state) {
  PeerDirectory& d = Full();
  // Across repetitions: each peer's events go on in sequence.
  static std::vector<std::uint64_t> seq(kPeers + 1, kChunksPerPeer / 1000);
  static std::vector<std::uint64_t> next(kPeers + 1, kChunksPerPeer);
  static PeerId p = 1;
  for (auto _ : state) {
    const ChunkId chunk = Id(p, next[p]++);
    d.Apply(p, 1, ++seq[p], DirectoryChange::kStored, std::span(&chunk, 1));
    const ChunkId gone = Id(p, next[p] - kChunksPerPeer);  // its oldest leaves: the load stays
    d.Apply(p, 1, ++seq[p], DirectoryChange::kRemoved, std::span(&gone, 1));
    p = p % kPeers + 1;
  }
  state.SetItemsProcessed(state.iterations() * 2);  // items: events
  state.counters["gaps"] = static_cast<double>(d.Stats().gaps);
  state.counters["stale_peers"] = static_cast<double>(d.Stats().stale_peers);
}
BENCHMARK(BM_DirectoryApplyStored)->Repetitions(5)->ReportAggregatesOnly(true);

// A departed peer of 1 M chunks forgotten (its filter freed).
void BM_DirectoryForgetPeer(benchmark::State& state) {
  PeerDirectory d;
  std::vector<ChunkId> batch(1000);
  for (auto _ : state) {
    state.PauseTiming();
    d.AddPeer(1, kChunksPerPeer);
    std::uint64_t seq = 0;
    for (std::uint64_t i = 0; i < kChunksPerPeer; i += batch.size()) {
      for (std::size_t j = 0; j < batch.size(); ++j) batch[j] = Id(1, i + j);
      d.Apply(1, 1, ++seq, DirectoryChange::kStored, batch);
    }
    state.ResumeTiming();
    d.ForgetPeer(1);
  }
}
BENCHMARK(BM_DirectoryForgetPeer)->Iterations(5)->Repetitions(3)->ReportAggregatesOnly(true);

}  // namespace
}  // namespace lmcache::fleet

BENCHMARK_MAIN();
