// PhasedWorkers: N forked worker processes that run timed phases in lockstep.
//
// Each worker runs `setup` once (connect, register, fill its buffers: never
// timed), then waits for the parent's "go" before every phase and reports
// "done" after it. The parent times each phase from the moment all workers
// are released until the last one reports, so a phase's time is wall time of
// the slowest worker, as a user sees it. A worker that fails reports it; the
// phase then fails with the worker's message.
// Thread-safety: single-threaded use by the parent process.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::bench {

// Runs in the child: returns OK or why it failed.
using WorkerFn = std::function<Status(int worker)>;

class PhasedWorkers {
 public:
  // Forks `workers` children that run `setup` and then serve phases.
  static Result<std::unique_ptr<PhasedWorkers>> Start(int workers, WorkerFn setup,
                                                      std::vector<WorkerFn> phases);
  ~PhasedWorkers();  // reaps the children (killing any still running)

  // Releases every worker into phase `index` and returns its wall time in seconds.
  Result<double> RunPhase(std::size_t index);
  std::vector<int> pids() const;

 private:
  struct Child {
    pid_t pid = -1;
    int to_child = -1;
    int from_child = -1;
  };
  PhasedWorkers() = default;
  Status Collect(const char* what);

  std::vector<Child> children_;
};

}  // namespace lmcache::bench
