// The physical reference of the shared-memory path: the same bytes copied by
// the same number of threads with memcpy, between touched buffers.
#include <chrono>
#include <cstring>
#include <latch>
#include <thread>

#include "paths.h"

namespace lmcache::bench {
namespace {

class MemcpyPath final : public BenchPath {
 public:
  explicit MemcpyPath(const BenchOptions& o) : options_(o) {
    for (int w = 0; w < o.workers; ++w) buffers_.push_back(MakePromptBuffers(o, w));
  }

  Result<RoundSample> Round() override {
    const int workers = options_.workers;
    std::latch ready(workers + 1);
    std::latch go(1);
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        ready.count_down();
        go.wait();
        PromptBuffers& b = buffers_[static_cast<std::size_t>(w)];
        for (std::size_t p = 0; p < b.data.size(); ++p) {
          std::memcpy(b.out[p].data(), b.data[p].data(), b.data[p].size());
        }
      });
    }
    ready.arrive_and_wait();
    const auto start = std::chrono::steady_clock::now();
    go.count_down();
    for (auto& t : threads) t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const PromptBuffers& b : buffers_) LMC_RETURN_IF_ERROR(b.Verify());
    const double gbps = static_cast<double>(options_.bytes_per_round()) / seconds / 1e9;
    return RoundSample{gbps, gbps};
  }

 private:
  BenchOptions options_;
  std::vector<PromptBuffers> buffers_;
};

}  // namespace

Result<std::unique_ptr<BenchPath>> StartMemcpyPath(const BenchOptions& o) {
  return std::unique_ptr<BenchPath>(std::make_unique<MemcpyPath>(o));
}

}  // namespace lmcache::bench
