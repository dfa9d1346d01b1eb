// lmcache-bench: shared definitions of the benchmark driver.
//
// Every path moves the same bytes: each of `workers` processes stores
// `prompts_per_worker` prompts of `tokens_per_prompt` tokens (full chunks of
// `chunk_size` tokens, `bytes_per_token` bytes each), then reads them back.
// A measurement is repeated `rounds` times, interleaved across paths
// (paths.h), and medians with their spread are reported.
// Thread-safety: plain data.
#pragma once

#include <cstddef>
#include <cstdint>
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
  bool sweep = false;                          // also measure the grid below
  std::vector<double> sweep_chunk_mib = {1, 4, 10, 32};
  std::vector<int> sweep_workers = {1, 2, 4};
  std::uint64_t sweep_round_mib = 512;         // bytes per round of each sweep point
  bool quick = false;
  bool skip_redis = false;
  bool latencies_only = false;  // skip the throughput paths (profiling the RPCs)
  bool skip_l2 = false;         // also skips the resp and s3 phases
  bool skip_s3 = false;         // the s3 phase (a Ceph gateway started by ceph_s3_script)
  std::string ceph_s3_script;   // tools/ceph_s3.sh (main.cc: the source tree's)
  std::uint64_t s3_memstore_mib = 6144;  // the gateway's OSD holds every object in memory
  bool skip_events = false;  // the KV events on/off phase
  bool skip_journal = false;  // the crash-recovery journal on/off phase
  bool skip_quota = false;    // the quota accounting on/off phase
  bool skip_chunk_sizes = false;             // the chunk-size phase (chunk_size_phase.h)
  std::uint64_t chunk_phase_tokens = 32768;  // its prompts' tokens
  bool skip_restart = false;  // the warm-restart phase
  std::vector<double> restart_pool_gb = {1, 5, 16};  // its pool sizes
  bool l2_odirect = true;  // the fs phase's use_odirect
  std::string l2_dir = "/var/tmp";  // the fs L2 phase works in a fresh directory under it
  std::uint64_t rebuild_objects = 10000;
  std::string json_path;
  // The p2p phase (p2p_phase.h): a prompt of `p2p_tokens` with Llama-3-8B's
  // KV per token (32 layers x 8 KV heads x 128 x K,V x bf16 = 128 KiB: a
  // 32 MiB object per 256-token chunk) loaded from a peer, and the time to
  // retrievable of a `p2p_ttr_tokens` prompt.
  bool skip_p2p = false;
  std::uint64_t p2p_tokens = 131072;
  bool p2p_tokens_given = false;  // on the command line: used as given, or the phase fails
  std::uint64_t p2p_bytes_per_token = 131072;
  std::uint64_t p2p_ttr_tokens = 10240;
  std::string ucx_perftest = "/usr/bin/ucx_perftest";

  std::uint64_t chunks_per_prompt() const { return tokens_per_prompt / chunk_size; }
  std::uint64_t object_bytes() const { return chunk_size * bytes_per_token; }
  std::uint64_t prompt_bytes() const { return chunks_per_prompt() * object_bytes(); }
  std::uint64_t bytes_per_round() const {
    return prompt_bytes() * static_cast<std::uint64_t>(prompts_per_worker * workers);
  }
};

// min / median / max of a set of samples (per-round figures or ratios).
struct Spread {
  double min = 0;
  double median = 0;
  double max = 0;
};
Spread SpreadOf(const std::vector<double>& values);
double Median(std::vector<double> values);

// Where the all-cached lookups' time went on the server: means per lookup
// over the timed loop, from its `stats` before and after (the request's own
// latency and the lookup_stage_duration_seconds histograms). The rest of a
// round trip is the client, the transport and the hand-offs between threads.
struct LookupStages {
  double server_us = 0;  // the request, from its start on a pool thread to its reply
  double decode_us = 0;  // the key
  double hash_us = 0;    // the chunk hashes (the hash cache answers them here)
  double lock_us = 0;    // the table walk: every chunk read-locked
};

struct Latencies {
  double ping_p50_us = 0;
  double zmq_echo_p50_us = 0;
  Spread ping_vs_echo;  // per block of alternating ping and echo samples
  double lookup_p50_us = 0;
  LookupStages lookup_stages;
  double shared_prefix_lookup_p50_us = 0;
  double shared_prefix_hit_fraction = 0;  // of the prompt's chunks, found cached
};

// Ping round trips to the server alternating with round trips of the same
// frames to a bare ZMQ ROUTER echo; lookups of a `lookup_tokens` prompt whose
// chunks are all cached; lookups of new prompts whose first 80 % is a cached
// shared system prompt.
Result<Latencies> MeasureLatencies(const BenchOptions& options, const std::string& url);
// Only the all-cached lookup (for a server started without a hash cache).
Result<double> MeasureLookupP50(const BenchOptions& options, const std::string& url);

// A touched, page-aligned anonymous buffer that forked children do not
// inherit (MADV_DONTFORK): the bench forks workers and helpers after some
// buffers exist, and a buffer shared copy-on-write with a child would pay a
// copy fault at its owner's next write into it, inside a timed round.
class PageBuffer {
 public:
  explicit PageBuffer(std::size_t size);
  ~PageBuffer();
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool operator==(const PageBuffer& other) const;

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Each worker's prompts: the bytes it stores (deterministic per worker and
// prompt) and touched buffers it retrieves into, so no page fault is timed.
struct PromptBuffers {
  std::vector<PageBuffer> data;
  std::vector<PageBuffer> out;
  // out == data, after a retrieve; then overwrites `out`, so that every round
  // is checked on bytes it wrote itself (untimed).
  Status Verify();
};

// Page faults (minor and major) process `pid` has taken so far, from
// /proc/<pid>/stat; 0 when it cannot be read.
std::uint64_t PageFaultsOf(int pid);
PromptBuffers MakePromptBuffers(const BenchOptions& options, int worker);

// Deterministic content of chunk `chunk` of prompt `prompt`.
void FillChunk(std::byte* out, std::uint64_t bytes, std::uint64_t prompt, std::uint64_t chunk);
// Token ids of prompt `prompt` (distinct prompts share no chunk).
std::vector<std::uint32_t> PromptTokens(std::uint64_t tokens, std::uint64_t prompt);

}  // namespace lmcache::bench
