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
#include "chunk_size_phase.h"
#include "events_phase.h"
#include "l2_phase.h"
#include "lmcache/client.h"
#include "local_ceph.h"
#include "local_redis.h"
#include "p2p_phase.h"
#include "paths.h"
#include "report.h"
#include "restart_phase.h"
#include "support/fleet_files.h"
#include "support/local_server.h"

namespace lmcache::bench {
namespace {

void Progress(const std::string& text) {
  std::fprintf(stderr, "[lmcache-bench] %s\n", text.c_str());
  std::fflush(stderr);
}

// A phase's error that says this machine cannot run it (a tool or the memory
// it needs is missing), as MeasureP2pPhase documents: skipped, not failed.
bool CannotRunHere(const Status& s) {
  return s.code() == ErrorCode::kNotFound || s.code() == ErrorCode::kResourceExhausted;
}

// Starts every path, then runs their rounds interleaved: round r of each path
// is taken back to back with round r of the others.
Result<PathResults> MeasurePaths(const BenchOptions& o, const std::string& url, int server_pid,
                                 bool with_redis) {
  PathResults result;
  result.tokens_per_prompt = o.tokens_per_prompt;
  result.object_bytes = o.object_bytes();
  result.workers = o.workers;
  Progress("starting the paths: " + std::to_string(o.workers) + " workers, " +
           std::to_string(o.tokens_per_prompt) + "-token prompts of " +
           std::to_string(o.object_bytes() >> 10) + " KiB chunks");
  LMC_ASSIGN_OR_RETURN(auto memcpy_path, StartMemcpyPath(o));
  LMC_ASSIGN_OR_RETURN(auto shm, StartShmPath(o, url, server_pid));
  LMC_ASSIGN_OR_RETURN(auto socket, StartSocketPath(o));
  std::unique_ptr<BenchPath> redis;
  if (with_redis) {
    LMC_ASSIGN_OR_RETURN(redis, StartRedisPath(o));
    result.redis.emplace();
  }
  // One untimed round of each first: the first touch of every buffer and the
  // servers' first allocations are not what the rounds compare.
  for (BenchPath* path : {memcpy_path.get(), shm.get(), socket.get(), redis.get()}) {
    if (path != nullptr) LMC_RETURN_IF_ERROR(path->Round().status());
  }
  for (int round = 0; round < o.rounds; ++round) {
    Progress("round " + std::to_string(round + 1) + " of " + std::to_string(o.rounds));
    LMC_ASSIGN_OR_RETURN(const RoundSample copied, memcpy_path->Round());
    result.memcpy_gbps.push_back(copied.store_gbps);
    result.stream_copy_gbps.push_back(copied.stream_copy_gbps.value_or(0));
    LMC_ASSIGN_OR_RETURN(const RoundSample through_shm, shm->Round());
    result.shm.Add(through_shm);
    LMC_ASSIGN_OR_RETURN(const RoundSample through_socket, socket->Round());
    result.socket.Add(through_socket);
    if (redis) {
      LMC_ASSIGN_OR_RETURN(const RoundSample through_redis, redis->Round());
      result.redis->Add(through_redis);
    }
  }
  return result;
}

// A sweep point: `chunk_mib` chunks, `workers` workers, about `sweep_round_mib`
// per round (one prompt per worker of whole chunks).
BenchOptions SweepPoint(const BenchOptions& o, double chunk_mib, int workers) {
  BenchOptions p = o;
  p.workers = workers;
  const auto object_bytes = static_cast<std::uint64_t>(chunk_mib * (1 << 20));
  p.bytes_per_token = object_bytes / o.chunk_size / 4 * 4;
  p.prompts_per_worker = 1;
  const std::uint64_t per_worker = (o.sweep_round_mib << 20) / static_cast<std::uint64_t>(workers);
  p.tokens_per_prompt = std::max<std::uint64_t>(1, per_worker / p.object_bytes()) * o.chunk_size;
  return p;
}

// The fs L2 phase and the index rebuild, in a fresh directory under --l2-dir.
Result<L2Figures> MeasureFsL2(const BenchOptions& o, const std::string& server_binary) {
  const tools::ScopedDirectory scratch(std::filesystem::path(o.l2_dir) /
                                       ("lmcache_bench_l2_" + std::to_string(getpid())));
  const std::filesystem::path& dir = scratch.path();
  std::filesystem::create_directories(dir / "objects");
  Progress("L2 fs phase in " + dir.string() + ": write-behind and load against direct disk I/O");
  auto reference = MakeDiskReference(dir.string());
  const std::string adapter = std::string(R"({"type":"fs","use_odirect":)") +
                              (o.l2_odirect ? "true" : "false") + R"(,"base_path":")" +
                              (dir / "objects").string() + R"("})";
  LMC_ASSIGN_OR_RETURN(L2Figures figures,
                       MeasureL2Phase(o, server_binary, {"--l2-adapter", adapter}, *reference));
  Progress("L2 fs index rebuild of " + std::to_string(o.rebuild_objects) + " objects");
  LMC_RETURN_IF_ERROR(MeasureFsRebuild(o, server_binary, (dir / "rebuild").string(),
                                       o.rebuild_objects, &figures));
  return figures;
}

// The resp L2 phase: a redis-server on a unix socket behind the server,
// against raw SET/GET of the same values on the same Redis.
Result<L2Figures> MeasureRespL2(const BenchOptions& o, const std::string& server_binary) {
  LMC_ASSIGN_OR_RETURN(auto redis, LocalRedis::Start(o.redis_binary, "lmcache_bench_resp"));
  Progress("L2 resp phase: write-behind to Redis and load back, against raw SET/GET");
  auto reference = MakeRawRedisReference(redis->socket_path());
  const std::string adapter =
      R"({"type":"resp","url":"unix://)" + redis->socket_path() + R"(","key_prefix":"bench:"})";
  LMC_ASSIGN_OR_RETURN(L2Figures figures,
                       MeasureL2Phase(o, server_binary, {"--l2-adapter", adapter}, *reference));
  Progress("L2 resp cross-node: stored through node A, looked up and retrieved through node B");
  LMC_RETURN_IF_ERROR(
      MeasureCrossNode(o, server_binary, {"--l2-adapter", adapter}, &figures.cross_node_gbps));
  return figures;
}

// The s3 L2 phase: a Ceph gateway (tools/ceph_s3.sh) behind the server,
// against the gateway's own PUT and GET of the same objects; then two servers
// sharing the bucket. The server's tier keeps max_capacity_gb 1, so it
// deletes old rounds and the gateway's in-memory store stays bounded; its
// deadline is a minute (a CI machine running builds beside the bench kept a
// PUT unanswered past the 5 s default: the bench measures, it does not bound).
Result<L2Figures> MeasureS3L2(const BenchOptions& o, const std::string& server_binary) {
  LMC_ASSIGN_OR_RETURN(auto ceph,
                       LocalCeph::Start(o.ceph_s3_script, "lmc-bench", o.s3_memstore_mib << 20));
  const S3Target target{ceph->env("S3_ENDPOINT"), "lmc-bench", ceph->env("S3_REGION"),
                        ceph->env("S3_ACCESS_KEY"), ceph->env("S3_SECRET_KEY")};
  LMC_ASSIGN_OR_RETURN(auto reference, MakeRawS3Reference(target));
  Progress("L2 s3 phase: write-behind to a Ceph gateway and load back, against its raw PUT/GET");
  const std::string adapter = R"({"type":"s3","s3_endpoint":")" + target.endpoint +
                              R"(","bucket":"lmc-bench","s3_region":")" + target.region +
                              R"(","aws_access_key_id":")" + target.access_key +
                              R"(","aws_secret_access_key":")" + target.secret_key +
                              R"(","key_prefix":"bench/","max_capacity_gb":1,"request_timeout_ms":60000})";
  LMC_ASSIGN_OR_RETURN(L2Figures figures,
                       MeasureL2Phase(o, server_binary, {"--l2-adapter", adapter}, *reference));
  Progress("L2 s3 cross-node: stored through node A, looked up and retrieved through node B");
  LMC_RETURN_IF_ERROR(
      MeasureCrossNode(o, server_binary, {"--l2-adapter", adapter}, &figures.cross_node_gbps));
  return figures;
}

Status ValidateP2p(const BenchOptions& o) {
  if (o.p2p_tokens < o.chunk_size || o.p2p_ttr_tokens < o.chunk_size) {
    return InvalidArgument("--p2p-tokens and --p2p-ttr-tokens must hold a --chunk-size chunk");
  }
  if (o.p2p_bytes_per_token == 0 || o.p2p_bytes_per_token % 4 != 0) {
    return InvalidArgument("--p2p-bytes-per-token must be a positive multiple of 4");
  }
  return Status::Ok();
}

Status Validate(const BenchOptions& o) {
  LMC_RETURN_IF_ERROR(ValidateP2p(o));
  if (o.chunk_size == 0 || o.tokens_per_prompt < o.chunk_size) {
    return InvalidArgument("--tokens-per-prompt must hold at least one --chunk-size chunk");
  }
  if (o.bytes_per_token == 0 || o.bytes_per_token % 4 != 0) {
    return InvalidArgument("--bytes-per-token must be a positive multiple of 4");
  }
  if (o.workers < 1 || o.rounds < 1 || o.prompts_per_worker < 1) {
    return InvalidArgument("--workers, --rounds and --prompts-per-worker must be >= 1");
  }
  for (const double mib : o.sweep_chunk_mib) {
    if (!(mib > 0) || mib > 1024) return InvalidArgument("--sweep-chunk-mib values must be in (0, 1024]");
  }
  for (const int w : o.sweep_workers) {
    if (w < 1 || w > 64) return InvalidArgument("--sweep-workers values must be in [1, 64]");
  }
  for (const double gb : o.restart_pool_gb) {
    if (!(gb > 0) || static_cast<double>(o.prompt_bytes()) > 0.75 * gb * (1ull << 30)) {
      return InvalidArgument("--restart-pool-gb values must hold a prompt in 75 % of the pool");
    }
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
    o.rebuild_objects = 1000;
    o.restart_pool_gb = {1};
    o.p2p_tokens = 2048;
    o.p2p_bytes_per_token = 16384;  // 4 MiB chunks
    o.p2p_ttr_tokens = 1024;
    o.chunk_phase_tokens = 4096;
  }
  if (Status s = Validate(o); !s.ok()) {
    std::fprintf(stderr, "lmcache-bench: %s\n", s.message().c_str());
    return 2;
  }
  int most_workers = o.workers;
  if (o.sweep) {
    for (const int w : o.sweep_workers) most_workers = std::max(most_workers, w);
  }
  std::unique_ptr<tools::LocalServer> local;
  std::string url = o.url;
  const std::string server_binary = tools::FindServerBinary(o.server_binary);
  std::optional<std::vector<RestartSample>> restart;
  if (!o.skip_restart && !o.latencies_only && o.url.empty()) {
    // First, before the other servers hold memory: its pools are the largest.
    Progress("warm restart: a successor takes over a 75 % full pool of each of --restart-pool-gb");
    auto measured = MeasureRestartPhase(o, server_binary);
    if (!measured.ok()) {
      std::fprintf(stderr, "lmcache-bench: %s\n", measured.status().ToString().c_str());
      return 1;
    }
    restart = std::move(measured).value();
  }
  if (url.empty()) {
    Progress("starting lmcache-server with a " + std::to_string(o.pool_gb) + " GiB pool");
    auto started = tools::LocalServer::Start(
        server_binary, "lmcache_bench_server",
        {"--l1-size-gb", std::to_string(o.pool_gb), "--max-gpu-workers",
         std::to_string(most_workers), "--max-cpu-workers", "2", "--log-level", "warn",
         "--chunk-size", std::to_string(o.chunk_size)});
    if (!started.ok()) {
      std::fprintf(stderr, "lmcache-bench: %s\n", started.status().ToString().c_str());
      return 1;
    }
    local = std::move(started).value();
    url = local->url();
  }
  BenchReport report;
  report.options = o;
  report.restart = std::move(restart);
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
  if (!o.latencies_only) {
    auto main_paths = MeasurePaths(o, url, local ? local->pid() : 0, !o.skip_redis);
    if (!main_paths.ok()) return fail(main_paths.status());
    report.main = std::move(main_paths).value();
  }
  Progress("latencies: ping alternating with a bare ZMQ echo, lookups of " +
           std::to_string(o.lookup_tokens) + " tokens, shared-prefix lookups");
  auto latencies = MeasureLatencies(o, url);
  if (!latencies.ok()) return fail(latencies.status());
  report.latencies = *latencies;
  if (local) {
    // The same lookup on a server that hashes every chunk afresh.
    Progress("lookup on a server without a hash cache");
    auto cold = tools::LocalServer::Start(server_binary, "lmcache_bench_cold",
                                          {"--l1-size-gb", "1", "--hash-cache-mb", "0",
                                           "--log-level", "warn", "--prefault-threads", "1",
                                           "--chunk-size", std::to_string(o.chunk_size)});
    if (!cold.ok()) return fail(cold.status());
    auto cold_p50 = MeasureLookupP50(o, (*cold)->url());
    if (!cold_p50.ok()) return fail(cold_p50.status());
    report.lookup_cold_p50_us = *cold_p50;
  }
  if (!o.skip_l2 && !o.latencies_only) {
    auto l2 = MeasureFsL2(o, server_binary);
    if (!l2.ok()) return fail(l2.status());
    report.l2 = std::move(l2).value();
  }
  if (!o.skip_l2 && !o.skip_redis && !o.latencies_only) {
    auto resp = MeasureRespL2(o, server_binary);
    if (!resp.ok()) return fail(resp.status());
    report.resp = std::move(resp).value();
  }
  if (!o.skip_l2 && !o.skip_s3 && !o.latencies_only) {
    auto s3 = MeasureS3L2(o, server_binary);
    if (CannotRunHere(s3.status()) || s3.status().code() == ErrorCode::kNotSupported) {
      Progress("s3 phase skipped: " + s3.status().message());
      report.skipped.emplace_back("s3", s3.status().message());
    } else if (!s3.ok()) {
      return fail(s3.status());
    } else {
      report.s3 = std::move(s3).value();
    }
  }
  if (!o.skip_p2p && !o.skip_redis && !o.latencies_only) {
    Progress("p2p: node B loads a " + std::to_string(o.p2p_tokens) +
             "-token prompt from node A's L1, against ucx_perftest and Redis; lookup to "
             "retrievable of " + std::to_string(o.p2p_ttr_tokens) + " tokens");
    auto p2p = MeasureP2pPhase(o, server_binary);
    if (CannotRunHere(p2p.status())) {
      Progress("p2p phase skipped: " + p2p.status().message());
      report.skipped.emplace_back("p2p", p2p.status().message());
    } else if (!p2p.ok()) {
      return fail(p2p.status());
    } else {
      report.p2p = std::move(p2p).value();
    }
  }
  if (!o.skip_events && !o.latencies_only) {
    Progress("KV events: the shm path's stores on a server with them off and one with them on");
    auto events = MeasureEventsPhase(o, server_binary);
    if (!events.ok()) return fail(events.status());
    report.events = std::move(events).value();
  }
  if (!o.skip_journal && !o.latencies_only) {
    Progress("journal: the shm path's stores on a server without --recover-pool and one with it");
    auto journal = MeasureJournalPhase(o, server_binary);
    if (!journal.ok()) return fail(journal.status());
    report.journal = std::move(journal).value();
  }
  if (!o.skip_quota && !o.latencies_only) {
    Progress("quota: the shm path's stores on a server with --quota-mode off and one charging "
             "every copy to its tenant's quota");
    auto quota = MeasureQuotaPhase(o, server_binary);
    if (!quota.ok()) return fail(quota.status());
    report.quota = std::move(quota).value();
  }
  if (!o.skip_chunk_sizes && !o.latencies_only) {
    Progress(
        "chunk sizes: store and lookup per token at 1, 16, 256, 640 and 2048 tokens per "
        "chunk, one model at each on one server");
    auto chunk_sizes = MeasureChunkSizePhase(o, server_binary);
    if (!chunk_sizes.ok()) return fail(chunk_sizes.status());
    report.chunk_sizes = std::move(chunk_sizes).value();
  }
  if (o.sweep) {
    for (const double chunk_mib : o.sweep_chunk_mib) {
      for (const int workers : o.sweep_workers) {
        const BenchOptions point = SweepPoint(o, chunk_mib, workers);
        if (Status s = Validate(point); !s.ok()) return fail(s);
        auto measured = MeasurePaths(point, url, local ? local->pid() : 0, /*with_redis=*/false);
        if (!measured.ok()) return fail(measured.status());
        report.sweep.push_back(std::move(measured).value());
      }
    }
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
  app.add_option("--chunk-size", o.chunk_size, "Tokens per chunk (the servers it starts use it; a --url server must match)")
      ->capture_default_str();
  app.add_option("--workers", o.workers, "Concurrent worker processes (and memcpy threads)")
      ->capture_default_str();
  app.add_option("--prompts-per-worker", o.prompts_per_worker,
                 "Prompts each worker stores and loads per round")
      ->capture_default_str();
  app.add_option("--rounds", o.rounds,
                 "Interleaved rounds of every path; medians and spreads are reported")
      ->capture_default_str();
  app.add_option("--pool-gb", o.pool_gb, "L1 pool of the started server, GiB")
      ->capture_default_str();
  app.add_option("--lookup-tokens", o.lookup_tokens, "Prompt length of the lookup latency test")
      ->capture_default_str();
  app.add_option("--latency-samples", o.latency_samples, "Round trips per latency figure")
      ->capture_default_str();
  app.add_flag("--sweep", o.sweep,
               "Also measure every (chunk size, workers) pair of --sweep-chunk-mib x "
               "--sweep-workers, without redis");
  app.add_option("--sweep-chunk-mib", o.sweep_chunk_mib, "Chunk sizes of the sweep, MiB")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--sweep-workers", o.sweep_workers, "Worker counts of the sweep")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--sweep-round-mib", o.sweep_round_mib, "Bytes per round of a sweep point, MiB")
      ->capture_default_str();
  app.add_option("--redis-server", o.redis_binary, "redis-server binary")->capture_default_str();
  app.add_flag("--skip-redis", o.skip_redis, "Do not measure Redis (its fields become null)");
  app.add_flag("--skip-l2", o.skip_l2, "Do not measure the fs L2 tier (its fields become null)");
  app.add_flag("--skip-s3", o.skip_s3,
               "Do not measure the s3 phase against a Ceph gateway (its fields become null)");
  o.ceph_s3_script = LMC_CEPH_S3_SCRIPT;
  app.add_option("--ceph-s3-script", o.ceph_s3_script,
                 "The script that starts the s3 phase's Ceph gateway")
      ->capture_default_str();
  app.add_option("--s3-memstore-mib", o.s3_memstore_mib,
                 "Memory of the s3 phase's Ceph OSD (it holds every object)")
      ->capture_default_str();
  app.add_flag("--skip-p2p", o.skip_p2p,
               "Do not measure the p2p phase (its fields become null; --skip-redis skips it too)");
  auto* p2p_tokens = app.add_option("--p2p-tokens", o.p2p_tokens,
                                    "Tokens of the prompt the p2p phase loads from a peer "
                                    "(not given: the default, halved until this machine's "
                                    "memory holds the phase)")
                         ->capture_default_str();
  app.add_option("--p2p-bytes-per-token", o.p2p_bytes_per_token,
                 "KV bytes per token in the p2p phase (default: Llama-3-8B's, 32 MiB per "
                 "256-token chunk)")
      ->capture_default_str();
  app.add_option("--p2p-ttr-tokens", o.p2p_ttr_tokens,
                 "Tokens of the prompt whose lookup-to-retrievable time the p2p phase measures")
      ->capture_default_str();
  app.add_option("--ucx-perftest", o.ucx_perftest, "ucx_perftest binary (Debian's ucx-utils)")
      ->capture_default_str();
  app.add_flag("--skip-events", o.skip_events,
               "Do not measure the store path with KV events on against off (its fields become "
               "null)");
  app.add_flag("--skip-journal", o.skip_journal,
               "Do not measure the store path with the crash-recovery journal on against off (its "
               "fields become null)");
  app.add_flag("--skip-quota", o.skip_quota,
               "Do not measure the store path with quota accounting on against off (its fields "
               "become null)");
  app.add_flag("--skip-chunk-sizes", o.skip_chunk_sizes,
               "Do not measure store and lookup per token at chunk sizes 1, 16, 256, 640 and "
               "2048 (its fields become null)");
  app.add_option("--chunk-phase-tokens", o.chunk_phase_tokens,
                 "Tokens of each prompt of the chunk-size phase (whole 2048-token chunks; "
                 "--quick: 4096)")
      ->capture_default_str();
  app.add_flag("--skip-restart", o.skip_restart,
               "Do not measure the warm restart (its fields become null)");
  app.add_option("--restart-pool-gb", o.restart_pool_gb,
                 "Pool sizes of the warm-restart phase, GiB (--quick: 1)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--l2-odirect", o.l2_odirect,
                 "The fs L2 phase reads and writes with O_DIRECT (false: through the page cache)")
      ->capture_default_str();
  app.add_option("--l2-dir", o.l2_dir,
                 "The fs L2 phase works in a fresh directory under this one (a local disk)")
      ->capture_default_str();
  app.add_option("--rebuild-objects", o.rebuild_objects,
                 "Objects whose index the fs L2 rebuild time is measured on")
      ->capture_default_str();
  app.add_flag("--latencies-only", o.latencies_only,
               "Measure only ping, echo and lookups (the throughput fields become null)");
  app.add_flag("--quick", o.quick,
               "Small data, 3 rounds: every figure in well under a minute (smoke runs)");
  app.add_option("--json", o.json_path, "Write the results as JSON to this path");
  CLI11_PARSE(app, argc, argv);
  o.p2p_tokens_given = p2p_tokens->count() > 0;
  return lmcache::bench::Run(o);
}
