// PrefaultGate: holds an L1 pool part-ready, as a large pool is for minutes
// after the server starts (its pre-faulter makes pages usable step by step).
//
// Tune an L1Config with Hold(): the pre-faulter then makes a step usable only
// once Allow() let the pool grow past the step's start. Open() lets it finish;
// call it before the cache is destroyed (its destructor joins the
// pre-faulter). The gate outlives the cache, so it is declared before it and
// its own destructor runs too late: a fixture opens it in its destructor.
//
// Thread-safety: every method from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>

#include "store/l1_cache.h"

namespace lmcache::testing {

class PrefaultGate {
 public:
  explicit PrefaultGate(std::uint64_t allowed_bytes) : allowed_(allowed_bytes) {}
  PrefaultGate(const PrefaultGate&) = delete;
  PrefaultGate& operator=(const PrefaultGate&) = delete;

  // Background pre-faulting in steps of `step_bytes`, held by this gate.
  void Hold(store::L1Config& l1, std::uint64_t step_bytes) {
    l1.background_prefault = true;
    l1.prefault_step_bytes = step_bytes;
    l1.before_prefault_step = [this](std::uint64_t ready_bytes) {
      std::unique_lock lock(mu_);
      changed_.wait(lock, [&] { return ready_bytes < allowed_; });
    };
  }
  void Allow(std::uint64_t bytes) {
    {
      std::lock_guard lock(mu_);
      allowed_ = bytes;
    }
    changed_.notify_all();
  }
  void Open() { Allow(std::numeric_limits<std::uint64_t>::max()); }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::uint64_t allowed_;
};

}  // namespace lmcache::testing
