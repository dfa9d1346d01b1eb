// lmcache-soak: worker processes hammering one server (or, with --nodes, a
// fleet of servers sharing over P2P, some killed and restarted as it runs)
// with checksummed stores, lookups, retrieves, abandoned transfers,
// re-registrations and kill -9, under eviction pressure; at the end every
// lock, lease and byte must balance on every server (docs/performance.md,
// "Soak").
//
// Prompts: `groups` system prompts of `shared_chunks` chunks each, and
// `prompts` requests, each a group's system prompt followed by its own
// `unique_chunks`. A chunk's bytes are a function of the tokens up to its end
// (its group and index for a shared chunk, its prompt and index otherwise),
// so any worker can verify any chunk any other worker stored.
// Thread-safety: the counters live in shared memory and are atomics; the rest
// is per process.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lmcache/status.h"
#include "support/fleet_files.h"
#include "support/local_server.h"

namespace lmcache::soak {

struct SoakOptions {
  std::string url;            // use this server instead of starting one
  std::string server_binary;  // lmcache-server to start (default: next to this tool)
  int workers = 4;
  double seconds = 60;
  int kill_every_ms = 2000;  // SIGKILL a random worker this often (0: never)
  double pool_gb = 0.125;    // small: the working set (528 MiB) does not fit, eviction runs
  int groups = 8;
  int prompts = 256;
  int shared_chunks = 4;
  int unique_chunks = 4;
  std::uint64_t chunk_size = 256;
  std::int64_t num_layers = 4;
  std::int64_t hidden = 128;  // 2 x 4 x 256 x 128 x 2 bytes = 512 KiB per chunk
  std::uint64_t seed = 1;
  std::string json_path;
  // The burst case: this many lookups with fresh request ids, never ended,
  // every burst_every_seconds (0: no burst process); the started server's
  // sessions expire after session_ttl_seconds.
  int burst_lookups = 0;
  double burst_every_seconds = 60;
  int session_ttl_seconds = 600;
  // The slow-L2 case: the started server gets a mock L2 tier moving this
  // many GB/s (0: no L2), so lookups of evicted prompts load from it and
  // their waits park.
  double l2_mock_gbps = 0;
  // The hung-L2 case: that L2 tier's calls (stores, lookups, loads) stall
  // for l2_hang_ms at a rate of l2_hang_rate (a backend that stops
  // answering now and then), and the server's prefetch deadline is
  // l2_load_timeout_seconds, so stalled loads are answered at twice it while
  // their buffers stay reserved (0: no stalls).
  int l2_hang_ms = 0;
  double l2_hang_rate = 0.02;
  double l2_load_timeout_seconds = 1;
  // The cascade case: in front of that tier, a first mock adapter holding
  // only this many GB (it evicts the oldest), so the prefetches of one
  // prompt load from both adapters at once (0: one adapter).
  double l2_cascade_first_gb = 0;
  // The fleet case: this many servers on loopback sharing over P2P (each
  // lists the others; a fleet key), workers spread over them, so a chunk
  // evicted on one node loads from another's L1; every kill_node_every_ms a
  // random node is killed with SIGKILL with its workers, and started again
  // (a new boot) with new workers (0: never).
  int nodes = 1;
  int kill_node_every_ms = 0;

  int chunks_per_prompt() const { return shared_chunks + unique_chunks; }
  std::uint64_t object_bytes() const {
    return 2u * static_cast<std::uint64_t>(num_layers) * chunk_size *
           static_cast<std::uint64_t>(hidden) * 2u;
  }
};

// Shared by every worker process (an anonymous shared mapping made before fork).
struct SoakCounters {
  std::atomic<std::uint64_t> iterations{0};
  std::atomic<std::uint64_t> stores{0};
  std::atomic<std::uint64_t> chunks_stored{0};
  std::atomic<std::uint64_t> chunks_out_of_memory{0};
  std::atomic<std::uint64_t> lookups{0};
  std::atomic<std::uint64_t> retrieves{0};
  std::atomic<std::uint64_t> chunks_verified{0};
  std::atomic<std::uint64_t> bytes_verified{0};
  std::atomic<std::uint64_t> corrupt_chunks{0};
  std::atomic<std::uint64_t> abandoned_lookups{0};
  std::atomic<std::uint64_t> abandoned_stores{0};
  std::atomic<std::uint64_t> reregistrations{0};
  std::atomic<std::uint64_t> registrations{0};  // answered; a worker killed first has none
  std::atomic<std::uint64_t> unexpected_errors{0};
  std::atomic<std::uint64_t> kills{0};
  std::atomic<std::uint64_t> node_kills{0};
  std::atomic<std::uint64_t> burst_lookups{0};
  // The probe's figures, written when it stops.
  std::atomic<std::uint64_t> probe_samples{0};
  std::atomic<std::uint64_t> probe_lookup_p50_us{0};
  std::atomic<std::uint64_t> probe_lookup_p99_us{0};
  std::atomic<std::uint64_t> probe_lookup_max_us{0};
  std::atomic<std::uint64_t> probe_stats_max_us{0};
  std::atomic<bool> stop{false};
};

std::vector<std::uint32_t> PromptTokens(const SoakOptions& o, int prompt);
// The bytes chunk `chunk` of `prompt` must hold.
void ChunkBytes(const SoakOptions& o, int prompt, int chunk, std::byte* out);

// The servers of a soak (nodes.cc): one, or `count` sharing over P2P on
// loopback. Each keeps its arguments, so a node killed is started again as
// itself (the same endpoints; a new boot id).
class SoakNodes {
 public:
  static Result<std::unique_ptr<SoakNodes>> Start(const std::string& binary, int count,
                                                  const std::vector<std::string>& args);
  ~SoakNodes() = default;  // stops every node, then removes the key's directory
  SoakNodes(const SoakNodes&) = delete;
  SoakNodes& operator=(const SoakNodes&) = delete;

  int count() const { return static_cast<int>(servers_.size()); }
  const std::string& url(int node) const { return servers_[static_cast<std::size_t>(node)]->url(); }
  // SIGKILL, then the same node again; waits until it answers.
  Status KillAndRestart(int node);

 private:
  SoakNodes() = default;
  Status StartNode(int node);
  std::string binary_;
  // The fleet key's (count > 1); declared before the servers, so they stop first.
  std::unique_ptr<tools::ScopedDirectory> dir_;
  std::vector<std::vector<std::string>> args_;
  std::vector<std::unique_ptr<tools::LocalServer>> servers_;
};

// The burst scheduler and the latency probe (burst.cc); return exit codes.
int RunBurst(const SoakOptions& o, const std::string& url, SoakCounters* counters);
int RunProbe(const SoakOptions& o, const std::string& url, SoakCounters* counters);

// The worker loop; returns its exit code.
int RunWorker(const SoakOptions& o, const std::string& url, int slot, std::int64_t instance_id,
              SoakCounters* counters);

}  // namespace lmcache::soak
