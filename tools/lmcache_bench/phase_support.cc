// What the server-starting phases of lmcache-bench share (phase_support.h).
#include "phase_support.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "support/server_stats.h"

namespace lmcache::bench {

RoundMemory::RoundMemory(std::uint64_t objects, std::uint64_t bytes_each)
    : object_bytes(bytes_each),
      in(static_cast<std::byte*>(std::aligned_alloc(4096, objects * bytes_each))),
      out(static_cast<std::byte*>(std::aligned_alloc(4096, objects * bytes_each))),
      count(objects) {
  if (in == nullptr || out == nullptr) throw std::bad_alloc();
}

RoundMemory::~RoundMemory() {
  std::free(in);
  std::free(out);
}

void RoundMemory::Fill(std::uint64_t first, std::uint64_t chunks) {
  for (std::uint64_t i = 0; i < count; ++i) {
    FillChunk(in + i * object_bytes, object_bytes, first + i / chunks, i % chunks);
  }
}

std::vector<std::span<const std::byte>> RoundMemory::Inputs() const {
  std::vector<std::span<const std::byte>> v;
  for (std::uint64_t i = 0; i < count; ++i) v.emplace_back(in + i * object_bytes, object_bytes);
  return v;
}

std::vector<std::span<std::byte>> RoundMemory::Outputs() const {
  std::vector<std::span<std::byte>> v;
  for (std::uint64_t i = 0; i < count; ++i) v.emplace_back(out + i * object_bytes, object_bytes);
  return v;
}

bool RoundMemory::Matches() {
  const std::uint64_t bytes = count * object_bytes;
  const bool same = std::memcmp(in, out, bytes) == 0;
  std::memset(out, 0xa5, bytes);
  return same;
}

Result<std::unique_ptr<client::Client>> ConnectRegistered(const std::string& url,
                                                          std::int64_t instance,
                                                          std::int64_t hidden) {
  client::ClientOptions options;
  options.url = url;
  options.request_timeout = std::chrono::milliseconds(120'000);
  LMC_ASSIGN_OR_RETURN(auto c, client::Client::Connect(options));
  client::EngineContext context;
  context.instance_id = instance;
  context.model_name = "bench-l2";
  context.num_layers = 1;
  context.hidden_dim_size = hidden;
  LMC_RETURN_IF_ERROR(c->Register(context).status());
  return c;
}

client::KeySpec PromptKey(const BenchOptions& o, std::uint64_t prompt, std::uint64_t chunks) {
  client::KeySpec key;
  key.model_name = "bench-l2";
  key.token_ids = PromptTokens(chunks * o.chunk_size, prompt);
  key.end = static_cast<std::int64_t>(chunks * o.chunk_size);
  key.request_id = "l2-" + std::to_string(prompt);
  return key;
}

Status WaitWrittenBehind(client::Client& c, double objects) {
  for (int i = 0; i < 120'000; ++i) {
    LMC_ASSIGN_OR_RETURN(const tools::ServerStats stats, tools::ServerStats::Fetch(c));
    const double stored = stats.Number("l2.store.stored").value_or(0);
    const double failed = stats.Number("l2.store.failed").value_or(0) +
                          stats.Number("l2.store.skipped_queue_full").value_or(0);
    if (failed > 0)
      return Internal("the L2 adapter failed or skipped objects (see the server log)");
    if (stored >= objects && stats.Number("l2.store.queued_objects") == 0 &&
        stats.Number("l2.store.in_flight") == 0) {
      return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return Status(ErrorCode::kTimeout, "L2 write-behind did not finish in a minute");
}

}  // namespace lmcache::bench
