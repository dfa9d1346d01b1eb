#include "restart_phase.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "lmcache/client.h"
#include "support/local_server.h"
#include "support/server_stats.h"

namespace lmcache::bench {
namespace {

constexpr double kFillFraction = 0.75;     // below the default eviction trigger (0.8)
constexpr std::uint64_t kVerifyEvery = 8;  // prompts whose bytes are checked through B

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

client::KeySpec RestartKey(const BenchOptions& o, std::uint64_t prompt, const char* use) {
  client::KeySpec key;
  key.model_name = "bench-restart";
  key.token_ids = PromptTokens(o.tokens_per_prompt, prompt);
  key.end = static_cast<std::int64_t>(o.chunks_per_prompt() * o.chunk_size);
  key.request_id = use;  // piecewise: GCC 12's -Wrestrict false positive on literal + string
  key.request_id += std::to_string(prompt);
  return key;
}

// A registered client of the server at `url` (objects of o.object_bytes()).
Result<std::unique_ptr<client::Client>> Worker(const BenchOptions& o, const std::string& url) {
  client::ClientOptions options;
  options.url = url;
  LMC_ASSIGN_OR_RETURN(auto c, client::Client::Connect(options));
  client::EngineContext context;
  context.instance_id = 9'000'000 + getpid();
  context.model_name = "bench-restart";
  context.num_layers = 1;
  context.hidden_dim_size = static_cast<std::int64_t>(o.bytes_per_token / 4);  // [2,1,chunk,h] bf16
  LMC_RETURN_IF_ERROR(c->Register(context).status());
  return c;
}

// Stores prompts until the pool is kFillFraction full; returns how many.
Result<std::uint64_t> Fill(const BenchOptions& o, client::Client& c, double pool_gb) {
  const auto pool_bytes = static_cast<std::uint64_t>(pool_gb * static_cast<double>(1ull << 30));
  const std::uint64_t prompts =
      static_cast<std::uint64_t>(kFillFraction * static_cast<double>(pool_bytes)) /
      o.prompt_bytes();
  PageBuffer data(o.prompt_bytes());
  for (std::uint64_t p = 0; p < prompts; ++p) {
    std::vector<std::span<const std::byte>> chunks;
    for (std::uint64_t k = 0; k < o.chunks_per_prompt(); ++k) {
      FillChunk(data.data() + k * o.object_bytes(), o.object_bytes(), p, k);
      chunks.emplace_back(data.data() + k * o.object_bytes(), o.object_bytes());
    }
    const client::KeySpec key = RestartKey(o, p, "s");
    LMC_ASSIGN_OR_RETURN(const client::StoreResult stored, c.Store(key, chunks));
    if (stored.stored != chunks.size()) {
      return Internal("restart fill: stored " + std::to_string(stored.stored) + " of " +
                      std::to_string(chunks.size()) + " chunks of prompt " + std::to_string(p));
    }
    (void)c.EndSession(key.request_id);
  }
  return prompts;
}

// Looks every prompt up through the successor; retrieves every kVerifyEvery-th
// and checks its bytes. Returns the chunks found.
Result<std::uint64_t> ServeThroughSuccessor(const BenchOptions& o, client::Client& c,
                                            std::uint64_t prompts) {
  std::uint64_t found = 0;
  PageBuffer out(o.prompt_bytes());
  PageBuffer expected(o.object_bytes());
  for (std::uint64_t p = 0; p < prompts; ++p) {
    client::KeySpec key = RestartKey(o, p, "r");
    LMC_ASSIGN_OR_RETURN(const std::size_t hits, c.Lookup(key));
    found += hits;
    if (p % kVerifyEvery != 0 || hits != o.chunks_per_prompt()) {
      (void)c.EndSession(key.request_id);
      continue;
    }
    std::vector<std::span<std::byte>> chunks;
    for (std::uint64_t k = 0; k < hits; ++k) {
      chunks.emplace_back(out.data() + k * o.object_bytes(), o.object_bytes());
    }
    LMC_RETURN_IF_ERROR(c.Retrieve(key, chunks));
    for (std::uint64_t k = 0; k < hits; ++k) {
      FillChunk(expected.data(), o.object_bytes(), p, k);
      if (std::memcmp(chunks[k].data(), expected.data(), o.object_bytes()) != 0) {
        return Internal("restart: chunk " + std::to_string(k) + " of prompt " + std::to_string(p) +
                        " differs after the takeover");
      }
    }
    (void)c.EndSession(key.request_id);
  }
  return found;
}

// Polls the server's stats until its journal has checksummed every committed
// object; returns how long that took.
Result<double> WaitSealed(client::Client& c) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    LMC_ASSIGN_OR_RETURN(const tools::ServerStats stats, tools::ServerStats::Fetch(c));
    if (stats.Number("restart.journal_awaiting_seal").value_or(1) == 0) return SecondsSince(start);
    if (SecondsSince(start) > 300) return Internal("restart: the journal never caught up");
    usleep(20'000);
  }
}

// Kills B with SIGKILL (a crash: nothing flushed or handed over) and measures
// server C recovering the pool B left.
Status MeasureRecovery(const BenchOptions& o, const std::string& binary,
                       std::vector<std::string> args, const std::string& url,
                       tools::LocalServer& victim, std::uint64_t prompts, RestartSample* sample) {
  victim.Kill();
  args.insert(args.end(), {"--url", url});
  const auto started = std::chrono::steady_clock::now();
  LMC_ASSIGN_OR_RETURN(auto recovered,
                       tools::LocalServer::Start(binary, "lmcache_bench_restart_c", args));
  sample->recovery_serve_seconds = SecondsSince(started);
  LMC_ASSIGN_OR_RETURN(auto c, Worker(o, url));
  LMC_ASSIGN_OR_RETURN(const std::uint64_t found, ServeThroughSuccessor(o, *c, prompts));
  sample->recovered_fraction =
      sample->objects ? static_cast<double>(found) / static_cast<double>(sample->objects) : 0;
  LMC_ASSIGN_OR_RETURN(const tools::ServerStats stats, tools::ServerStats::Fetch(*c));
  sample->recovery_seconds = stats.Number("restart.recovery_seconds").value_or(0);
  return Status::Ok();
}

Result<RestartSample> MeasureOne(const BenchOptions& o, const std::string& binary, double pool_gb) {
  RestartSample sample;
  sample.pool_gb = pool_gb;
  const std::string shm_name = "lmcache_l1_pool_bench_restart_" + std::to_string(getpid());
  // At info: the takeover's own timings (export, transfer, adoption) reach
  // the bench's stderr when the servers stop.
  const std::vector<std::string> common = {"--l1-size-gb",  std::to_string(pool_gb),
                                           "--shm-name",    shm_name,
                                           "--log-level",   "info",
                                           "--chunk-size",  std::to_string(o.chunk_size),
                                           "--recover-pool"};
  LMC_ASSIGN_OR_RETURN(auto a,
                       tools::LocalServer::Start(binary, "lmcache_bench_restart_a", common));
  std::uint64_t prompts = 0;
  {
    LMC_ASSIGN_OR_RETURN(auto c, Worker(o, a->url()));
    const auto start = std::chrono::steady_clock::now();
    LMC_ASSIGN_OR_RETURN(prompts, Fill(o, *c, pool_gb));
    sample.fill_seconds = SecondsSince(start);
  }
  sample.objects = prompts * o.chunks_per_prompt();
  // B binds A's endpoint too, so A's workers would reach it.
  std::vector<std::string> successor = common;
  successor.insert(successor.end(), {"--takeover", "--url", a->url()});
  const auto started = std::chrono::steady_clock::now();
  LMC_ASSIGN_OR_RETURN(auto b,
                       tools::LocalServer::Start(binary, "lmcache_bench_restart_b", successor));
  sample.serve_seconds = SecondsSince(started);
  LMC_ASSIGN_OR_RETURN(auto c, Worker(o, a->url()));
  LMC_ASSIGN_OR_RETURN(const std::uint64_t found, ServeThroughSuccessor(o, *c, prompts));
  sample.served_fraction =
      sample.objects ? static_cast<double>(found) / static_cast<double>(sample.objects) : 0;
  LMC_ASSIGN_OR_RETURN(const tools::ServerStats stats, tools::ServerStats::Fetch(*c));
  sample.takeover_seconds = stats.Number("restart.takeover_seconds").value_or(0);
  sample.adopted_objects =
      static_cast<std::uint64_t>(stats.Number("restart.adopted_objects").value_or(0));
  LMC_ASSIGN_OR_RETURN(sample.reseal_seconds, WaitSealed(*c));
  c.reset();
  LMC_RETURN_IF_ERROR(MeasureRecovery(o, binary, common, a->url(), *b, prompts, &sample));
  return sample;
}

}  // namespace

Result<std::vector<RestartSample>> MeasureRestartPhase(const BenchOptions& o,
                                                       const std::string& binary) {
  std::vector<RestartSample> samples;
  for (const double pool_gb : o.restart_pool_gb) {
    LMC_ASSIGN_OR_RETURN(RestartSample sample, MeasureOne(o, binary, pool_gb));
    samples.push_back(sample);
  }
  return samples;
}

}  // namespace lmcache::bench
