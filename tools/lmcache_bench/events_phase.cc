#include "events_phase.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "paths.h"
#include "support/local_server.h"

namespace lmcache::bench {
namespace {

constexpr std::uint64_t kSmallObjectBytes = 64u << 10;

// A server for one side: a pool twice one round (at least 1 GiB), quiet
// logs, and `feature` (the flags of the side).
Result<std::unique_ptr<tools::LocalServer>> StartSide(const BenchOptions& o,
                                                      const std::string& binary,
                                                      const std::vector<std::string>& feature,
                                                      const std::string& name) {
  const double pool_gb = std::max(1.0, 2.0 * static_cast<double>(o.bytes_per_round()) / (1 << 30));
  std::vector<std::string> args = {
      "--l1-size-gb",      std::to_string(pool_gb),     "--log-level",        "warn",
      "--max-gpu-workers", std::to_string(o.workers),   "--prefault-threads", "1",
      "--chunk-size",      std::to_string(o.chunk_size)};
  args.insert(args.end(), feature.begin(), feature.end());
  return tools::LocalServer::Start(binary, name, args);
}

struct Sides {
  std::string name;  // "lmcache_bench_<name>_off" / "_on"
  std::vector<std::string> off;
  std::vector<std::string> on;
};

// Rounds of the shm path against both servers, alternately (off first in
// odd rounds, on first in even ones, so neither always runs second).
Status Alternate(const BenchOptions& o, const std::string& binary, const Sides& sides,
                 std::vector<double>* off, std::vector<double>* on) {
  const std::string prefix = "lmcache_bench_" + sides.name;
  LMC_ASSIGN_OR_RETURN(auto off_server, StartSide(o, binary, sides.off, prefix + "_off"));
  LMC_ASSIGN_OR_RETURN(auto on_server, StartSide(o, binary, sides.on, prefix + "_on"));
  LMC_ASSIGN_OR_RETURN(auto off_path, StartShmPath(o, off_server->url(), off_server->pid()));
  LMC_ASSIGN_OR_RETURN(auto on_path, StartShmPath(o, on_server->url(), on_server->pid()));
  LMC_RETURN_IF_ERROR(off_path->Round().status());  // untimed: first touches
  LMC_RETURN_IF_ERROR(on_path->Round().status());
  for (int round = 0; round < o.rounds; ++round) {
    BenchPath* order[2] = {off_path.get(), on_path.get()};
    if (round % 2 == 1) std::swap(order[0], order[1]);
    for (BenchPath* path : order) {
      LMC_ASSIGN_OR_RETURN(const RoundSample sample, path->Round());
      (path == off_path.get() ? off : on)->push_back(sample.store_gbps);
    }
  }
  return Status::Ok();
}

Result<OnOffFigures> MeasureOnOff(const BenchOptions& o, const std::string& binary,
                                  const Sides& sides) {
  OnOffFigures figures;
  LMC_RETURN_IF_ERROR(Alternate(o, binary, sides, &figures.off_store_gbps, &figures.on_store_gbps));
  // Small chunks: prompts of the same length, more of them per worker (up
  // to the same bytes per round, at most 64), so many more objects.
  BenchOptions small = o;
  small.bytes_per_token = std::max<std::uint64_t>(4, kSmallObjectBytes / o.chunk_size / 4 * 4);
  const std::uint64_t prompts = o.bytes_per_round() / static_cast<std::uint64_t>(o.workers) /
                                std::max<std::uint64_t>(1, small.prompt_bytes());
  small.prompts_per_worker = static_cast<int>(std::clamp<std::uint64_t>(prompts, 1, 64));
  LMC_RETURN_IF_ERROR(
      Alternate(small, binary, sides, &figures.small_off_store_gbps, &figures.small_on_store_gbps));
  return figures;
}

}  // namespace

Result<OnOffFigures> MeasureEventsPhase(const BenchOptions& o, const std::string& binary) {
  // On: the channel as a router deployment runs it, the log and the publisher
  // encoding every record (no subscriber needed for that cost).
  return MeasureOnOff(o, binary,
                      {"events",
                       {"--kv-event-log-size", "0"},
                       {"--kv-events-url",
                        "ipc:///tmp/lmcache_bench_events_" + std::to_string(getpid()) + ".pub"}});
}

Result<OnOffFigures> MeasureJournalPhase(const BenchOptions& o, const std::string& binary) {
  return MeasureOnOff(
      o, binary,
      {"journal",
       {},
       {"--recover-pool", "--shm-name", "bench_journal_" + std::to_string(getpid())}});
}

Result<OnOffFigures> MeasureQuotaPhase(const BenchOptions& o, const std::string& binary) {
  // The bench stores under the empty salt (_default); a quota of 1 PiB
  // never binds, so what differs is the accounting alone.
  return MeasureOnOff(o, binary,
                      {"quota",
                       {"--quota-mode", "off"},
                       {"--quota-mode", "on", "--quota", "_default=1048576"}});
}

}  // namespace lmcache::bench
