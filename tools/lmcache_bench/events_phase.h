// The KV events phase of lmcache-bench: what recording KV events costs the
// store path. Two servers, one with the channel off (--kv-event-log-size 0)
// and one with it on and publishing in vLLM's format (--kv-events-url),
// take the shared-memory path's rounds alternately, at the run's chunk
// geometry and at small (64 KiB) chunks, where the per-chunk cost of a
// record is largest against the bytes moved.
// Thread-safety: single-threaded use by the driver.
#pragma once

#include <string>
#include <vector>

#include "bench.h"

namespace lmcache::bench {

struct EventsFigures {
  // Per round, store GB/s of each server at the run's geometry.
  std::vector<double> off_store_gbps;
  std::vector<double> on_store_gbps;
  // The same at 64 KiB chunks.
  std::vector<double> small_off_store_gbps;
  std::vector<double> small_on_store_gbps;
};

Result<EventsFigures> MeasureEventsPhase(const BenchOptions& options,
                                         const std::string& server_binary);

}  // namespace lmcache::bench
