// The on/off phases of lmcache-bench: what a server feature costs the store
// path. Two servers, one with the feature off and one with it on, take the
// shared-memory path's rounds alternately, at the run's chunk geometry and at
// small (64 KiB) chunks, where a per-chunk cost is largest against the bytes
// moved. The features: KV events (off: --kv-event-log-size 0; on: publishing
// in vLLM's format, --kv-events-url), and the crash-recovery journal (on:
// --recover-pool, whose sealer also reads every byte stored), and per-tenant
// quota accounting (off: --quota-mode off; on: a quota on the bench's
// tenant, as large as the pool, so every copy is charged and checked and
// none is refused or evicted for it).
// Thread-safety: single-threaded use by the driver.
#pragma once

#include <string>
#include <vector>

#include "bench.h"

namespace lmcache::bench {

struct OnOffFigures {
  // Per round, store GB/s of each server at the run's geometry.
  std::vector<double> off_store_gbps;
  std::vector<double> on_store_gbps;
  // The same at 64 KiB chunks.
  std::vector<double> small_off_store_gbps;
  std::vector<double> small_on_store_gbps;
};

Result<OnOffFigures> MeasureEventsPhase(const BenchOptions& options,
                                        const std::string& server_binary);
Result<OnOffFigures> MeasureJournalPhase(const BenchOptions& options,
                                         const std::string& server_binary);
Result<OnOffFigures> MeasureQuotaPhase(const BenchOptions& options,
                                       const std::string& server_binary);

}  // namespace lmcache::bench
