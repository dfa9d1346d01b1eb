// The benchmark's results, printed as a table and written as JSON.
// The JSON field names are a stable interface (docs/performance.md).
// Thread-safety: plain data and functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench.h"
#include "chunk_size_phase.h"
#include "events_phase.h"
#include "l2_phase.h"
#include "p2p_phase.h"
#include "paths.h"
#include "restart_phase.h"

namespace lmcache::bench {

// Per-round samples of one path, in round order (round r of every path was
// taken back to back with round r of the others).
struct PathSamples {
  std::vector<double> store_gbps;
  std::vector<double> retrieve_gbps;
  std::vector<double> store_faults_per_mib;  // where the path counts them
  std::vector<double> retrieve_faults_per_mib;
  void Add(const RoundSample& s) {
    store_gbps.push_back(s.store_gbps);
    retrieve_gbps.push_back(s.retrieve_gbps);
    if (s.store_faults_per_mib) store_faults_per_mib.push_back(*s.store_faults_per_mib);
    if (s.retrieve_faults_per_mib) retrieve_faults_per_mib.push_back(*s.retrieve_faults_per_mib);
  }
};

struct PathResults {
  std::uint64_t tokens_per_prompt = 0;
  std::uint64_t object_bytes = 0;
  int workers = 0;
  std::vector<double> memcpy_gbps;
  std::vector<double> stream_copy_gbps;  // the client's copy kernel, same rounds
  PathSamples shm;
  PathSamples socket;
  std::optional<PathSamples> redis;  // absent with --skip-redis (and in sweep points)
};

// The per-round ratios of one PathResults (their medians are the headline ratios).
struct PathRatios {
  Spread store_vs_memcpy;
  Spread retrieve_vs_memcpy;
  Spread store_vs_stream_copy;
  Spread retrieve_vs_stream_copy;
  Spread shm_vs_socket;
  std::optional<Spread> shm_vs_redis;
};
PathRatios RatiosOf(const PathResults& p);

struct BenchReport {
  BenchOptions options;
  PathResults main;
  Latencies latencies;
  std::optional<double> lookup_cold_p50_us;  // a server without a hash cache (not with --url)
  std::optional<L2Figures> l2;                // the fs phase (absent with --skip-l2)
  std::optional<L2Figures> resp;              // the resp phase (absent with --skip-l2 or --skip-redis)
  std::optional<L2Figures> s3;                // the s3 phase (absent with --skip-l2 or --skip-s3)
  std::optional<OnOffFigures> events;         // the KV events phase (absent with --skip-events)
  std::optional<OnOffFigures> journal;        // the journal phase (absent with --skip-journal)
  std::optional<OnOffFigures> quota;          // the quota phase (absent with --skip-quota)
  std::optional<ChunkSizeFigures> chunk_sizes;        // absent with --skip-chunk-sizes
  std::optional<std::vector<RestartSample>> restart;  // absent with --skip-restart
  std::optional<P2pFigures> p2p;  // absent with --skip-p2p or --skip-redis
  std::vector<PathResults> sweep;
  std::string server_version;
  // Phases this machine could not run, each with why ("p2p", the reason):
  // in the table and the JSON's "skipped", their fields null.
  std::vector<std::pair<std::string, std::string>> skipped;
};

// The headline figures, in their documented order; nullopt = not measured.
std::vector<std::pair<std::string, std::optional<double>>> HeadlineFields(const BenchReport& r);

void PrintTable(const BenchReport& report);
Status WriteJson(const BenchReport& report, const std::string& path);

}  // namespace lmcache::bench
