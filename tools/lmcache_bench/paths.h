// The paths the benchmark compares, each measured one round at a time.
//
// A path is started once (servers, worker processes, buffers: never timed)
// and then asked for rounds. The driver interleaves them (memcpy, shm,
// socket, redis, memcpy, shm, ...), so every ratio compares rounds taken
// seconds apart under the same conditions, and reports the spread of the
// per-round ratios. Each round stores the same bytes, reads them back into
// other buffers and verifies them (untimed), then empties the store.
// Thread-safety: single-threaded use by the driver.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bench.h"

namespace lmcache::bench {

struct RoundSample {
  double store_gbps = 0;
  double retrieve_gbps = 0;
  // Page faults the path's processes took per MiB moved (its workers, and
  // its server where the bench knows the pid); absent where not counted.
  std::optional<double> store_faults_per_mib;
  std::optional<double> retrieve_faults_per_mib;
  // The memcpy path only: the same round's bytes copied chunk by chunk with
  // the client's copy kernel (StreamCopy).
  std::optional<double> stream_copy_gbps;
};

class BenchPath {
 public:
  virtual ~BenchPath() = default;
  virtual Result<RoundSample> Round() = 0;
};

// `workers` threads memcpy the round's bytes (store and retrieve are the same
// copy), then copy them again with StreamCopy (`stream_copy_gbps`).
Result<std::unique_ptr<BenchPath>> StartMemcpyPath(const BenchOptions& options);
// The shared-memory path through the real RPCs of the server at `url`
// (`server_pid` > 0: its page faults are counted with the workers').
Result<std::unique_ptr<BenchPath>> StartShmPath(const BenchOptions& options,
                                                const std::string& url, int server_pid);
// Payload in ZMQ frames; a bench-side server copies it into and out of its memory.
Result<std::unique_ptr<BenchPath>> StartSocketPath(const BenchOptions& options);
// Redis on a unix socket, persistence off: pipelined SET/GET through hiredis.
Result<std::unique_ptr<BenchPath>> StartRedisPath(const BenchOptions& options);

class PhasedWorkers;

// A path driven by PhasedWorkers with phases 0 (store), 1 (retrieve) and
// 2 (verify, untimed); `between_rounds` empties the store, `stop` tears down
// what the path started once the workers are gone.
class PhasedPath final : public BenchPath {
 public:
  PhasedPath(const BenchOptions& options, std::unique_ptr<PhasedWorkers> workers,
             std::function<Status()> between_rounds, std::function<void()> stop,
             int server_pid = 0);
  ~PhasedPath() override;
  Result<RoundSample> Round() override;

 private:
  std::uint64_t Faults() const;  // of the workers and the server

  double round_bytes_;
  int server_pid_;
  std::unique_ptr<PhasedWorkers> workers_;
  std::function<Status()> between_rounds_;
  std::function<void()> stop_;
};

}  // namespace lmcache::bench
