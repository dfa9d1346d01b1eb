// What every path of the benchmark shares: prompt contents, buffers, rounds, spreads.
#include <algorithm>
#include <cstring>

#include "bench.h"
#include "paths.h"
#include "phased_workers.h"

namespace lmcache::bench {

Spread SpreadOf(const std::vector<double>& values) {
  if (values.empty()) return {};
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return {*lo, Median(values), *hi};
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

void FillChunk(std::byte* out, std::uint64_t bytes, std::uint64_t prompt, std::uint64_t chunk) {
  std::uint64_t x = (prompt + 1) * 0x9e3779b97f4a7c15ull ^ (chunk + 1) * 0xc2b2ae3d27d4eb4full;
  for (std::uint64_t i = 0; i < bytes; i += 8) {
    x ^= x << 13;  // xorshift: cheap, and no two chunks alike
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out + i, &x, std::min<std::uint64_t>(8, bytes - i));
  }
}

std::vector<std::uint32_t> PromptTokens(std::uint64_t tokens, std::uint64_t prompt) {
  std::vector<std::uint32_t> ids(tokens);
  for (std::uint64_t i = 0; i < tokens; ++i) {
    ids[i] = static_cast<std::uint32_t>((prompt * 2654435761u + i * 40503u) & 0x7fffffff);
  }
  return ids;
}

PromptBuffers MakePromptBuffers(const BenchOptions& o, int worker) {
  PromptBuffers buffers;
  for (int p = 0; p < o.prompts_per_worker; ++p) {
    std::vector<std::byte> prompt(o.prompt_bytes());
    for (std::uint64_t c = 0; c < o.chunks_per_prompt(); ++c) {
      FillChunk(prompt.data() + c * o.object_bytes(), o.object_bytes(),
                static_cast<std::uint64_t>(worker * 1000 + p), c);
    }
    buffers.data.push_back(std::move(prompt));
    buffers.out.emplace_back(o.prompt_bytes(), std::byte{0});
  }
  return buffers;
}

Status PromptBuffers::Verify() const {
  for (std::size_t p = 0; p < data.size(); ++p) {
    if (out[p] != data[p])
      return Internal("prompt " + std::to_string(p) + ": retrieved bytes differ");
  }
  return Status::Ok();
}

PhasedPath::PhasedPath(const BenchOptions& o, std::unique_ptr<PhasedWorkers> workers,
                       std::function<Status()> between_rounds, std::function<void()> stop)
    : round_bytes_(static_cast<double>(o.bytes_per_round())),
      workers_(std::move(workers)),
      between_rounds_(std::move(between_rounds)),
      stop_(std::move(stop)) {}

PhasedPath::~PhasedPath() {
  workers_.reset();  // the workers go before what they talk to
  if (stop_) stop_();
}

Result<RoundSample> PhasedPath::Round() {
  LMC_ASSIGN_OR_RETURN(const double store_s, workers_->RunPhase(0));
  LMC_ASSIGN_OR_RETURN(const double retrieve_s, workers_->RunPhase(1));
  LMC_RETURN_IF_ERROR(workers_->RunPhase(2).status());  // verify: not timed
  LMC_RETURN_IF_ERROR(between_rounds_());
  return RoundSample{round_bytes_ / store_s / 1e9, round_bytes_ / retrieve_s / 1e9};
}

}  // namespace lmcache::bench
