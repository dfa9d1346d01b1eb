// lmcache-bench: shared definitions of the benchmark driver.
//
// Every path moves the same bytes: each of `workers` processes stores
// `prompts_per_worker` prompts of `tokens_per_prompt` tokens (full chunks of
// `chunk_size` tokens, `bytes_per_token` bytes each), then reads them back.
// A measurement is repeated `rounds` times and the median is reported.
// Thread-safety: plain data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::bench {

struct BenchOptions {
  std::string url;            // connect to this server instead of starting one
  std::string server_binary;  // lmcache-server to start (default: next to this tool)
  std::string redis_binary = "/usr/bin/redis-server";
  std::uint64_t tokens_per_prompt = 4096;
  std::uint64_t bytes_per_token =
      32768;  // 8 MiB per 256-token chunk (e.g. 8 layers x 1024 x K,V x bf16)
  std::uint64_t chunk_size = 256;
  int workers = 2;
  int prompts_per_worker = 2;
  int rounds = 5;  // repetitions of each measurement; medians are reported
  double pool_gb = 4;
  std::uint64_t lookup_tokens = 131072;
  int latency_samples = 2000;
  std::vector<std::uint64_t> sweep_tokens;  // extra prompt sizes for the throughput plot
  bool quick = false;
  bool skip_redis = false;
  std::string json_path;

  std::uint64_t chunks_per_prompt() const { return tokens_per_prompt / chunk_size; }
  std::uint64_t object_bytes() const { return chunk_size * bytes_per_token; }
  std::uint64_t prompt_bytes() const { return chunks_per_prompt() * object_bytes(); }
  std::uint64_t bytes_per_round() const {
    return prompt_bytes() * static_cast<std::uint64_t>(prompts_per_worker * workers);
  }
};

// Throughput of one path: GB/s (10^9 bytes per second), median of the rounds.
struct Throughput {
  double store_gbps = 0;
  double retrieve_gbps = 0;
  std::vector<double> store_samples;
  std::vector<double> retrieve_samples;
};

double Median(std::vector<double> values);

// The same bytes as a store round, copied by `workers` threads with memcpy.
Result<double> MeasureMemcpyGbps(const BenchOptions& options);

// The shared-memory path through the real RPCs of the server at `url`.
Result<Throughput> MeasureShmPath(const BenchOptions& options, const std::string& url);

// The path shared memory replaces: payload in ZMQ frames, a bench-side server
// copies it into (and out of) its own pre-faulted memory.
Result<Throughput> MeasureSocketPath(const BenchOptions& options);

// Redis (started here on a unix socket, persistence off): SET and GET of the
// same chunks through hiredis, pipelined per prompt.
Result<Throughput> MeasureRedisPath(const BenchOptions& options);

struct Latencies {
  double ping_p50_us = 0;
  double zmq_echo_p50_us = 0;
  double lookup_p50_us = 0;
};

// Ping round trips to the server, a bare ROUTER echo of the same frames, and
// lookups of a `lookup_tokens` prompt whose chunks are all cached.
Result<Latencies> MeasureLatencies(const BenchOptions& options, const std::string& url);

class PhasedWorkers;

// Each worker's prompts: the bytes it stores (deterministic per worker and
// prompt) and touched buffers it retrieves into, so no page fault is timed.
struct PromptBuffers {
  std::vector<std::vector<std::byte>> data;
  std::vector<std::vector<std::byte>> out;
  Status Verify() const;  // out == data, after a retrieve
};
PromptBuffers MakePromptBuffers(const BenchOptions& options, int worker);

// Runs `rounds` rounds of phases 0 (store), 1 (retrieve) and 2 (verify, not
// timed) and turns the times into GB/s; `between_rounds` empties the store.
Result<Throughput> RunRounds(const BenchOptions& options, PhasedWorkers& workers,
                             const std::function<Status()>& between_rounds);

// Deterministic content of chunk `chunk` of prompt `prompt`.
void FillChunk(std::byte* out, std::uint64_t bytes, std::uint64_t prompt, std::uint64_t chunk);
// Token ids of prompt `prompt` (distinct prompts share no chunk).
std::vector<std::uint32_t> PromptTokens(std::uint64_t tokens, std::uint64_t prompt);

}  // namespace lmcache::bench
