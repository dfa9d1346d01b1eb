// The p2p phase of lmcache-bench (issue 42, section 8): node B loads a
// prompt from node A's L1 over the fleet's data channel (UCX), against UCX's
// own rates over the same transport (ucx_perftest, ucp_get and ucp_am_bw,
// one chunk's size) and against the other cross-node path, Redis (server C
// stores the prompt through a resp L2 adapter to a redis-server on TCP,
// server D loads it), round by round, interleaved; the owner's CPU per GB
// served; and the time from lookup to retrievable of a shorter prompt from
// the peer, from the local L1 and from an fs L2 tier. All on loopback: the
// servers speak TCP to each other (their UCX endpoints handle a peer's
// failure, which UCX's shared-memory transports do not), as nodes without
// RDMA do; tools/p2p_bench.py does the same between network namespaces.
// Thread-safety: single-threaded use by the driver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench.h"

namespace lmcache::bench {

struct P2pFigures {
  std::uint64_t prompt_tokens = 0;
  std::uint64_t object_bytes = 0;
  std::uint64_t ttr_tokens = 0;
  // Per round, in round order (round r of each taken back to back).
  std::vector<double> load_gbps;           // B's lookup until every chunk is in its L1
  // C's, the same from A with --p2p-verify-bytes false (no payload digest):
  // load_gbps against it is what the digest costs.
  std::vector<double> unverified_load_gbps;
  std::vector<double> ucp_get_gbps;        // ucx_perftest -t ucp_get
  std::vector<double> ucp_am_bw_gbps;      // ucx_perftest -t ucp_am_bw
  std::vector<double> redis_load_gbps;     // D's lookup, loading from Redis
  std::vector<double> owner_cpu_s_per_gb;  // A's CPU seconds per GB of the load
  std::vector<double> ttr_peer_ms;         // lookup until retrievable: from A, into B
  std::vector<double> ttr_l1_ms;           // on A, where it is resident
  std::vector<double> ttr_fs_ms;           // on E, from its fs L2 tier
};

// Memory the phase holds at once (servers' pools, redis, the bench's buffers).
std::uint64_t P2pPhaseBytes(const BenchOptions& options);

// NOT_FOUND (no ucx_perftest) or RESOURCE_EXHAUSTED (no prompt fits in this
// machine's memory): the phase cannot run here, and the caller skips it
// with that reason. Any other error is a failure of what it measures.
Result<P2pFigures> MeasureP2pPhase(const BenchOptions& options, const std::string& server_binary);

}  // namespace lmcache::bench
