// FaultAdapter: wraps another adapter and fails or delays a configured
// fraction of its operations (`{"type":"fault_inject","inner":{...},
// "store_failure_rate":0.1,"load_failure_rate":0.1,"lookup_failure_rate":0,
// "delay_ms":5,"delay_rate":0.5,"seed":1}`), so tests and soaks can prove that L2 failures
// cost hits, never correctness. A failed lookup reports nothing found; a
// failed load reports kFailed without touching the buffer's verified bytes
// (it scribbles over them, so a controller that admitted them anyway would
// be caught by the byte checks).
//
// Thread-safety: internally synchronised (the random source is locked).
#pragma once

#include <memory>
#include <random>

#include "common/mutex.h"
#include "tier/forwarding_adapter.h"

namespace lmcache::tier {

struct FaultConfig {
  double store_failure_rate = 0;
  double load_failure_rate = 0;
  double lookup_failure_rate = 0;
  std::uint32_t delay_ms = 0;  // added to a `delay_rate` fraction of the calls
  double delay_rate = 1;       // 1: every call is delayed
  std::uint64_t seed = 1;
};

struct L2AdapterSpec;
// The `fault_inject` type's configuration (fault_adapter_type.cc): the
// faults, and the adapter they wrap.
struct FaultSpec {
  FaultConfig faults;
  std::shared_ptr<L2AdapterSpec> inner;
};

class FaultAdapter final : public ForwardingAdapter {
 public:
  FaultAdapter(std::unique_ptr<L2Adapter> inner, const FaultConfig& config);

  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override;
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override;
  void SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes,
                    LookupDone done) override;
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override;
  L2AdapterStats Stats() const override;

  // Calls delayed so far.
  std::uint64_t delayed() const { return delayed_.load(std::memory_order_relaxed); }

 private:
  bool Chance(double rate) LMC_EXCLUDES(mu_);
  // Chance(rate), counted as an injected fault when it hits.
  bool Roll(double rate) LMC_EXCLUDES(mu_);
  void Delay();

  const FaultConfig config_;
  Mutex mu_;
  std::mt19937_64 random_ LMC_GUARDED_BY(mu_);
  std::atomic<std::uint64_t> injected_{0};
  std::atomic<std::uint64_t> delayed_{0};
};

}  // namespace lmcache::tier
