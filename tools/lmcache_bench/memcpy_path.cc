// The physical reference of the shared-memory path: the same bytes copied by
// the same number of threads with memcpy, between touched buffers.
#include <chrono>
#include <cstring>
#include <latch>
#include <thread>

#include "bench.h"

namespace lmcache::bench {

Result<double> MeasureMemcpyGbps(const BenchOptions& o) {
  std::vector<PromptBuffers> buffers;
  for (int w = 0; w < o.workers; ++w) buffers.push_back(MakePromptBuffers(o, w));
  std::vector<double> samples;
  for (int round = 0; round < o.rounds; ++round) {
    std::latch ready(o.workers + 1);
    std::latch go(1);
    std::vector<std::thread> threads;
    for (int w = 0; w < o.workers; ++w) {
      threads.emplace_back([&, w] {
        ready.count_down();
        go.wait();
        for (std::size_t p = 0; p < buffers[w].data.size(); ++p) {
          std::memcpy(buffers[w].out[p].data(), buffers[w].data[p].data(),
                      buffers[w].data[p].size());
        }
      });
    }
    ready.arrive_and_wait();
    const auto start = std::chrono::steady_clock::now();
    go.count_down();
    for (auto& t : threads) t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    samples.push_back(static_cast<double>(o.bytes_per_round()) / seconds / 1e9);
  }
  for (const PromptBuffers& b : buffers) LMC_RETURN_IF_ERROR(b.Verify());
  return Median(samples);
}

}  // namespace lmcache::bench
