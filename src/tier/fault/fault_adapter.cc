#include "tier/fault/fault_adapter.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

namespace lmcache::tier {

FaultAdapter::FaultAdapter(std::unique_ptr<L2Adapter> inner, const FaultConfig& config)
    : ForwardingAdapter(std::move(inner)), config_(config), random_(config.seed) {}

bool FaultAdapter::Chance(double rate) {
  if (rate <= 0) return false;
  MutexLock lock(&mu_);
  return std::uniform_real_distribution<double>(0, 1)(random_) < rate;
}

bool FaultAdapter::Roll(double rate) {
  const bool fail = Chance(rate);
  if (fail) injected_.fetch_add(1, std::memory_order_relaxed);
  return fail;
}

void FaultAdapter::Delay() {
  if (config_.delay_ms == 0 || !Chance(config_.delay_rate)) return;
  delayed_.fetch_add(1, std::memory_order_relaxed);
  std::this_thread::sleep_for(std::chrono::milliseconds(config_.delay_ms));
}

void FaultAdapter::SubmitStore(std::span<const L2Write> objects, StoreDone done) {
  Delay();
  auto results = std::make_shared<std::vector<Status>>(objects.size());
  std::vector<L2Write> passed;
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < objects.size(); ++i) {
    if (Roll(config_.store_failure_rate)) {
      (*results)[i] = Status(ErrorCode::kIoError, "injected store failure");
    } else {
      passed.push_back(objects[i]);
      where.push_back(i);
    }
  }
  // `passed` is ours: the inner adapter reads it until its completion runs.
  auto held = std::make_shared<std::vector<L2Write>>(std::move(passed));
  ForwardingAdapter::SubmitStore(
      *held, [held, results, where = std::move(where), done = std::move(done)](
                 std::vector<Status> inner) mutable {
        for (std::size_t j = 0; j < inner.size() && j < where.size(); ++j) {
          (*results)[where[j]] = std::move(inner[j]);
        }
        done(std::move(*results));
      });
}

std::vector<bool> FaultAdapter::LookupAndLock(std::span<const store::ObjectKey> keys) {
  Delay();
  if (Roll(config_.lookup_failure_rate)) return std::vector<bool>(keys.size(), false);
  return ForwardingAdapter::LookupAndLock(keys);
}

void FaultAdapter::SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes,
                                LookupDone done) {
  Delay();
  if (Roll(config_.lookup_failure_rate)) {
    done(std::vector<bool>(keys.size(), false));
    return;
  }
  ForwardingAdapter::SubmitLookup(keys, object_bytes, std::move(done));
}

void FaultAdapter::SubmitLoad(std::span<const L2Read> reads, LoadDone done) {
  Delay();
  ForwardingAdapter::SubmitLoad(reads, [this, reads, done = std::move(done)](
                                           std::vector<L2LoadOutcome> outcomes) mutable {
    for (std::size_t i = 0; i < reads.size() && i < outcomes.size(); ++i) {
      if (Roll(config_.load_failure_rate)) {
        // A failed read may have written anything: make sure nobody uses it.
        std::memset(reads[i].out.data(), 0xEE, reads[i].out.size());
        outcomes[i] = L2LoadOutcome::kFailed;
      }
    }
    done(std::move(outcomes));
  });
}

L2AdapterStats FaultAdapter::Stats() const {
  L2AdapterStats s = ForwardingAdapter::Stats();
  s.type = "fault_inject(" + s.type + ")";
  s.description = "fault_inject(" + s.description + ")";
  return s;
}

}  // namespace lmcache::tier
