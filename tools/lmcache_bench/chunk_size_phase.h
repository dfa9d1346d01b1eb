// The chunk-size phase of lmcache-bench: what one token costs to store and
// to look up at chunk sizes 1 (SGLang's linker stores a chunk per page),
// 16, 256 (the default), 640 (a hybrid model's) and 2048, all in one run on
// one server that serves a model at each (--chunk-size 1, then
// --model-chunk-size and a --model-url endpoint per size). Each round takes
// the sizes in a rotated order; per round and size a prompt never seen
// before is stored (prepare, copy, commit of every chunk, 1 KiB per token)
// and then looked up (lookup and wait_prefetch_status in a new session; its
// locks freed after, untimed), each time divided by its tokens.
// Thread-safety: single-threaded use by the driver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench.h"

namespace lmcache::bench {

inline constexpr std::uint64_t kPhaseChunkSizes[] = {1, 16, 256, 640, 2048};

struct ChunkSizeFigures {
  std::uint64_t tokens = 0;  // per prompt
  // [size index][round], as kPhaseChunkSizes.
  std::vector<std::vector<double>> store_ns_per_token;
  std::vector<std::vector<double>> lookup_ns_per_token;
  // Per round: the cost at chunk size 1 over the cost at 256.
  std::vector<double> store_1_vs_256() const;
  std::vector<double> lookup_1_vs_256() const;
};

Result<ChunkSizeFigures> MeasureChunkSizePhase(const BenchOptions& options,
                                               const std::string& server_binary);

}  // namespace lmcache::bench
