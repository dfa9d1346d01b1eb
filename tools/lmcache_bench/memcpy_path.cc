// The physical references of the shared-memory path: the same bytes copied by
// the same number of threads between touched buffers, once with glibc's
// memcpy (a prompt per call) and once with the client's own copy kernel
// (StreamCopy, a chunk per call, as the client copies into the pool), timed
// separately in the same round. The second says what the path costs beyond
// its copies; the first, how it compares with what an engine would do itself.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <latch>
#include <thread>

#include "common/stream_copy.h"
#include "paths.h"

namespace lmcache::bench {
namespace {

class MemcpyPath final : public BenchPath {
 public:
  explicit MemcpyPath(const BenchOptions& o) : options_(o) {
    for (int w = 0; w < o.workers; ++w) buffers_.push_back(MakePromptBuffers(o, w));
  }

  Result<RoundSample> Round() override {
    LMC_ASSIGN_OR_RETURN(const double memcpy_gbps,
                         TimedCopy([](PageBuffer& out, const PageBuffer& in) {
                           std::memcpy(out.data(), in.data(), in.size());
                         }));
    const std::size_t chunk = options_.object_bytes();
    LMC_ASSIGN_OR_RETURN(const double stream_gbps,
                         TimedCopy([chunk](PageBuffer& out, const PageBuffer& in) {
                           for (std::size_t at = 0; at < in.size(); at += chunk) {
                             StreamCopy(out.data() + at, in.data() + at,
                                        std::min(chunk, in.size() - at));
                           }
                         }));
    RoundSample sample;
    sample.store_gbps = memcpy_gbps;
    sample.retrieve_gbps = memcpy_gbps;
    sample.stream_copy_gbps = stream_gbps;
    return sample;
  }

 private:
  // Every worker's thread runs copy(out, data) for each of its prompts, all
  // at once; GB/s of the round's bytes, after a check that the copies arrived.
  template <typename Copy>
  Result<double> TimedCopy(Copy copy) {
    const int workers = options_.workers;
    std::latch ready(workers + 1);
    std::latch go(1);
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        ready.count_down();
        go.wait();
        PromptBuffers& b = buffers_[static_cast<std::size_t>(w)];
        for (std::size_t p = 0; p < b.data.size(); ++p) copy(b.out[p], b.data[p]);
      });
    }
    ready.arrive_and_wait();
    const auto start = std::chrono::steady_clock::now();
    go.count_down();
    for (auto& t : threads) t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (PromptBuffers& b : buffers_) LMC_RETURN_IF_ERROR(b.Verify());
    return static_cast<double>(options_.bytes_per_round()) / seconds / 1e9;
  }

  BenchOptions options_;
  std::vector<PromptBuffers> buffers_;
};

}  // namespace

Result<std::unique_ptr<BenchPath>> StartMemcpyPath(const BenchOptions& o) {
  return std::unique_ptr<BenchPath>(std::make_unique<MemcpyPath>(o));
}

}  // namespace lmcache::bench
