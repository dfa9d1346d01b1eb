// lmcache-bench: measures the shared-memory store/retrieve path of
// lmcache-server against memcpy, a copy-through-socket path and Redis, and
// the RPC latencies, side by side in one run (docs/performance.md).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "bench.h"
#include "support/local_server.h"
#include "lmcache/client.h"
#include "report.h"

namespace lmcache::bench {
namespace {

void Progress(const std::string& text) {
  std::fprintf(stderr, "[lmcache-bench] %s\n", text.c_str());
  std::fflush(stderr);
}

Result<PathResults> MeasurePaths(const BenchOptions& o, const std::string& url) {
  PathResults result;
  result.tokens_per_prompt = o.tokens_per_prompt;
  const std::string size = std::to_string(o.tokens_per_prompt) + "-token prompts";
  Progress("memcpy, " + size);
  LMC_ASSIGN_OR_RETURN(result.memcpy_gbps, MeasureMemcpyGbps(o));
  Progress("shared-memory path, " + size);
  LMC_ASSIGN_OR_RETURN(result.shm, MeasureShmPath(o, url));
  Progress("copy-through-socket path, " + size);
  LMC_ASSIGN_OR_RETURN(result.socket, MeasureSocketPath(o));
  if (!o.skip_redis) {
    Progress("redis, " + size);
    LMC_ASSIGN_OR_RETURN(result.redis, MeasureRedisPath(o));
  }
  return result;
}

Status Validate(const BenchOptions& o) {
  if (o.chunk_size == 0 || o.tokens_per_prompt < o.chunk_size) {
    return InvalidArgument("--tokens-per-prompt must hold at least one --chunk-size chunk");
  }
  if (o.bytes_per_token == 0 || o.bytes_per_token % 4 != 0) {
    return InvalidArgument("--bytes-per-token must be a positive multiple of 4");
  }
  if (o.workers < 1 || o.rounds < 1 || o.prompts_per_worker < 1) {
    return InvalidArgument("--workers, --rounds and --prompts-per-worker must be >= 1");
  }
  const double needed = static_cast<double>(o.bytes_per_round()) / (1ull << 30);
  if (o.url.empty() && needed > o.pool_gb * 0.75) {
    return InvalidArgument("one round moves " + std::to_string(needed) +
                           " GiB: raise --pool-gb or lower the prompt size");
  }
  return Status::Ok();
}

int Run(BenchOptions o) {
  if (o.quick) {
    // Every figure, on small data: well under a minute on 2 cores.
    o.tokens_per_prompt = 1024;
    o.bytes_per_token = 16384;  // 4 MiB chunks
    o.prompts_per_worker = 1;
    o.rounds = 3;
    o.pool_gb = 1;
    o.latency_samples = 200;
  }
  if (Status s = Validate(o); !s.ok()) {
    std::fprintf(stderr, "lmcache-bench: %s\n", s.message().c_str());
    return 2;
  }
  std::unique_ptr<tools::LocalServer> local;
  std::string url = o.url;
  if (url.empty()) {
    Progress("starting lmcache-server with a " + std::to_string(o.pool_gb) + " GiB pool");
    auto started = tools::LocalServer::Start(
        tools::FindServerBinary(o.server_binary), "lmcache_bench_server",
        {"--l1-size-gb", std::to_string(o.pool_gb), "--max-gpu-workers",
         std::to_string(std::max(1, o.workers)), "--max-cpu-workers", "2", "--log-level", "warn"});
    if (!started.ok()) {
      std::fprintf(stderr, "lmcache-bench: %s\n", started.status().ToString().c_str());
      return 1;
    }
    local = std::move(started).value();
    url = local->url();
  }
  BenchReport report;
  report.options = o;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "lmcache-bench: %s\n", s.ToString().c_str());
    return 1;
  };
  {
    client::ClientOptions options;
    options.url = url;
    auto c = client::Client::Connect(options);
    if (!c.ok()) return fail(c.status());
    auto info = (*c)->GetServerInfo();
    if (!info.ok()) return fail(info.status());
    report.server_version = info->version;
    if (info->chunk_size != static_cast<std::int64_t>(o.chunk_size)) {
      return fail(
          InvalidArgument("the server's chunk size is " + std::to_string(info->chunk_size)));
    }
  }
  auto main_paths = MeasurePaths(o, url);
  if (!main_paths.ok()) return fail(main_paths.status());
  report.main = std::move(main_paths).value();
  Progress("latencies: ping, bare ZMQ echo, lookup of " + std::to_string(o.lookup_tokens) +
           " tokens");
  auto latencies = MeasureLatencies(o, url);
  if (!latencies.ok()) return fail(latencies.status());
  report.latencies = *latencies;
  for (const std::uint64_t tokens : o.sweep_tokens) {
    BenchOptions sweep = o;
    sweep.tokens_per_prompt = tokens;
    if (Status s = Validate(sweep); !s.ok()) return fail(s);
    auto point = MeasurePaths(sweep, url);
    if (!point.ok()) return fail(point.status());
    report.sweep.push_back(std::move(point).value());
  }
  PrintTable(report);
  if (!o.json_path.empty()) {
    if (Status s = WriteJson(report, o.json_path); !s.ok()) return fail(s);
    Progress("wrote " + o.json_path);
  }
  return 0;
}

}  // namespace
}  // namespace lmcache::bench

int main(int argc, char** argv) {
  lmcache::bench::BenchOptions o;
  CLI::App app{
      "lmcache-bench: lmcache-server's shared-memory path against memcpy, a "
      "copy-through-socket path and Redis, in one run. Defaults fit a 2-core, "
      "24 GiB machine.",
      "lmcache-bench"};
  app.add_option("--url", o.url,
                 "Benchmark a running server (ipc:// or tcp://) instead of "
                 "starting one; it must share this host's /dev/shm");
  app.add_option("--server-binary", o.server_binary,
                 "lmcache-server to start (default: the one built next to this tool)");
  app.add_option("--tokens-per-prompt", o.tokens_per_prompt, "Tokens per prompt (full chunks)")
      ->capture_default_str();
  app.add_option("--bytes-per-token", o.bytes_per_token,
                 "KV bytes per token (an 8B model in bf16: 131072); multiple of 4")
      ->capture_default_str();
  app.add_option("--chunk-size", o.chunk_size, "Tokens per chunk (must match the server)")
      ->capture_default_str();
  app.add_option("--workers", o.workers, "Concurrent worker processes (and memcpy threads)")
      ->capture_default_str();
  app.add_option("--prompts-per-worker", o.prompts_per_worker,
                 "Prompts each worker stores and loads per round")
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "Repetitions of each measurement; medians are reported")
      ->capture_default_str();
  app.add_option("--pool-gb", o.pool_gb, "L1 pool of the started server, GiB")
      ->capture_default_str();
  app.add_option("--lookup-tokens", o.lookup_tokens, "Prompt length of the lookup latency test")
      ->capture_default_str();
  app.add_option("--latency-samples", o.latency_samples, "Round trips per latency figure")
      ->capture_default_str();
  app.add_option("--sweep", o.sweep_tokens,
                 "Also measure these prompt sizes (tokens, comma-separated) for the plot")
      ->delimiter(',');
  app.add_option("--redis-server", o.redis_binary, "redis-server binary")->capture_default_str();
  app.add_flag("--skip-redis", o.skip_redis, "Do not measure Redis (its fields become null)");
  app.add_flag("--quick", o.quick,
               "Small data, 3 rounds: every figure in well under a minute (smoke runs)");
  app.add_option("--json", o.json_path, "Write the results as JSON to this path");
  CLI11_PARSE(app, argc, argv);
  return lmcache::bench::Run(o);
}
