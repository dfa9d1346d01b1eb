// What every path of the benchmark shares: prompt contents, buffers, rounds, spreads.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <sstream>
#include <utility>

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
  // Ids of Llama 3's vocabulary, as a tokenizer's are: on the wire about
  // half take 3 bytes and half 5, at random, which is what a key's encoder
  // and decoder pay for in a real prompt. The first id differs for any two
  // of 128256 consecutive prompts, so no two share a chunk at any size.
  constexpr std::uint64_t kVocabulary = 128256;
  std::vector<std::uint32_t> ids(tokens);
  std::uint64_t state = prompt * 0x9e3779b97f4a7c15ull;
  for (std::uint64_t i = 0; i < tokens; ++i) {
    state += 0x9e3779b97f4a7c15ull;  // splitmix64
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    ids[i] = static_cast<std::uint32_t>((i == 0 ? prompt : z ^ (z >> 31)) % kVocabulary);
  }
  return ids;
}

PageBuffer::PageBuffer(std::size_t size) : size_(size) {
  if (size == 0) return;
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<std::byte*>(mapped);
  (void)madvise(data_, size_, MADV_DONTFORK);
  std::memset(data_, 0, size_);  // touched: no fault is left for a timed copy
}

PageBuffer::~PageBuffer() {
  if (data_ != nullptr) munmap(data_, size_);
}

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

bool PageBuffer::operator==(const PageBuffer& other) const {
  return size_ == other.size_ && (size_ == 0 || std::memcmp(data_, other.data_, size_) == 0);
}

std::uint64_t PageFaultsOf(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t name_end = stat.rfind(')');  // the command name may hold spaces
  if (name_end == std::string::npos) return 0;
  std::istringstream fields(stat.substr(name_end + 2));
  // From field 3 (state) on: minflt is field 10, majflt field 12.
  std::string field;
  std::uint64_t minor = 0;
  std::uint64_t major = 0;
  for (int index = 3; index <= 12 && fields >> field; ++index) {
    if (index == 10) minor = std::strtoull(field.c_str(), nullptr, 10);
    if (index == 12) major = std::strtoull(field.c_str(), nullptr, 10);
  }
  return minor + major;
}

PromptBuffers MakePromptBuffers(const BenchOptions& o, int worker) {
  PromptBuffers buffers;
  for (int p = 0; p < o.prompts_per_worker; ++p) {
    PageBuffer prompt(o.prompt_bytes());
    for (std::uint64_t c = 0; c < o.chunks_per_prompt(); ++c) {
      FillChunk(prompt.data() + c * o.object_bytes(), o.object_bytes(),
                static_cast<std::uint64_t>(worker * 1000 + p), c);
    }
    buffers.data.push_back(std::move(prompt));
    buffers.out.emplace_back(o.prompt_bytes());
  }
  return buffers;
}

Status PromptBuffers::Verify() {
  for (std::size_t p = 0; p < data.size(); ++p) {
    if (!(out[p] == data[p]))
      return Internal("prompt " + std::to_string(p) + ": retrieved bytes differ");
    // No chunk of the prompts is all 0xEE: a round that leaves any of it
    // unwritten fails its own check.
    std::memset(out[p].data(), 0xEE, out[p].size());
  }
  return Status::Ok();
}

PhasedPath::PhasedPath(const BenchOptions& o, std::unique_ptr<PhasedWorkers> workers,
                       std::function<Status()> between_rounds, std::function<void()> stop,
                       int server_pid)
    : round_bytes_(static_cast<double>(o.bytes_per_round())),
      server_pid_(server_pid),
      workers_(std::move(workers)),
      between_rounds_(std::move(between_rounds)),
      stop_(std::move(stop)) {}

PhasedPath::~PhasedPath() {
  workers_.reset();  // the workers go before what they talk to
  if (stop_) stop_();
}

std::uint64_t PhasedPath::Faults() const {
  std::uint64_t faults = server_pid_ > 0 ? PageFaultsOf(server_pid_) : 0;
  for (const int pid : workers_->pids()) faults += PageFaultsOf(pid);
  return faults;
}

Result<RoundSample> PhasedPath::Round() {
  const double mib = round_bytes_ / (1 << 20);
  const std::uint64_t before_store = Faults();
  LMC_ASSIGN_OR_RETURN(const double store_s, workers_->RunPhase(0));
  const std::uint64_t after_store = Faults();
  LMC_ASSIGN_OR_RETURN(const double retrieve_s, workers_->RunPhase(1));
  const std::uint64_t after_retrieve = Faults();
  LMC_RETURN_IF_ERROR(workers_->RunPhase(2).status());  // verify: not timed
  LMC_RETURN_IF_ERROR(between_rounds_());
  RoundSample sample;
  sample.store_gbps = round_bytes_ / store_s / 1e9;
  sample.retrieve_gbps = round_bytes_ / retrieve_s / 1e9;
  sample.store_faults_per_mib = static_cast<double>(after_store - before_store) / mib;
  sample.retrieve_faults_per_mib = static_cast<double>(after_retrieve - after_store) / mib;
  return sample;
}

}  // namespace lmcache::bench
