// The benchmark's results, printed as a table and written as JSON.
// The JSON field names are a stable interface (docs/performance.md).
// Thread-safety: plain data and functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench.h"

namespace lmcache::bench {

struct PathResults {
  std::uint64_t tokens_per_prompt = 0;
  double memcpy_gbps = 0;
  Throughput shm;
  Throughput socket;
  std::optional<Throughput> redis;  // absent with --skip-redis
};

struct BenchReport {
  BenchOptions options;
  PathResults main;
  Latencies latencies;
  std::vector<PathResults> sweep;
  std::string server_version;
};

// The 15 headline figures, in their documented order; nullopt = not measured.
std::vector<std::pair<std::string, std::optional<double>>> HeadlineFields(const BenchReport& r);

void PrintTable(const BenchReport& report);
Status WriteJson(const BenchReport& report, const std::string& path);

}  // namespace lmcache::bench
