// PeriodicThread: runs a task every `period` on a thread of its own.
//
// The evictor, the service's maintenance pass and (with the L2 tier) the
// controllers' housekeeping share it. Nudge() runs the task at once. A task
// that throws is logged and counted, and the loop goes on: a background loop
// never dies. Every completed run is a heartbeat (its steady time), which the
// health watchdog reads to tell a wedged loop from a live one.
//
// Thread-safety: Start/Stop from the owning thread; Nudge and the accessors
// from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"

namespace lmcache {

class PeriodicThread {
 public:
  PeriodicThread(std::string name, std::chrono::milliseconds period, std::function<void()> task);
  ~PeriodicThread();  // stops
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  void Start();
  void Stop();
  void Nudge();

  std::uint64_t runs() const { return runs_.load(std::memory_order_relaxed); }
  std::uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  // SteadyClock time of the last completed run; 0 before the first.
  TimeMs last_run_ms() const { return last_run_ms_.load(std::memory_order_relaxed); }
  std::chrono::milliseconds period() const { return period_; }

 private:
  void Loop();

  const std::string name_;
  const std::chrono::milliseconds period_;
  const std::function<void()> task_;
  std::thread thread_;
  Mutex mu_;
  CondVar wake_;
  bool stop_ LMC_GUARDED_BY(mu_) = false;
  bool nudged_ LMC_GUARDED_BY(mu_) = false;
  std::atomic<std::uint64_t> runs_{0};
  std::atomic<std::uint64_t> errors_{0};
  std::atomic<TimeMs> last_run_ms_{0};
};

}  // namespace lmcache
