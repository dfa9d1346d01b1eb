// GatedAdapter: an L2 adapter whose store or load calls block until the test
// opens its gate, as a hung backend would (a Redis node that stopped
// answering, a network disk that froze). Everything else goes straight to
// the adapter it wraps.
//
// Thread-safety: as the wrapped adapter; Open() and entered() from any thread.
#pragma once

#include <atomic>
#include <future>
#include <limits>
#include <span>
#include <vector>

#include "tier/l2_adapter.h"

namespace lmcache::testing {

class GatedAdapter final : public tier::L2Adapter {
 public:
  enum class Gated { kStore, kLoad };
  // Only the first `held_calls` gated calls wait; later ones go through.
  GatedAdapter(tier::L2Adapter* inner, Gated gated, int held_calls = std::numeric_limits<int>::max())
      : inner_(inner), gated_(gated), held_calls_(held_calls), opened_(gate_.get_future().share()) {}
  void SubmitStore(std::span<const tier::L2Write> objects, StoreDone done) override {
    if (gated_ == Gated::kStore) Hold();
    inner_->SubmitStore(objects, std::move(done));
  }
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override {
    return inner_->LookupAndLock(keys);
  }
  void Unlock(std::span<const store::ObjectKey> keys) override { inner_->Unlock(keys); }
  void SubmitLoad(std::span<const tier::L2Read> reads, LoadDone done) override {
    if (gated_ == Gated::kLoad) Hold();
    inner_->SubmitLoad(reads, std::move(done));
  }
  tier::L2AdapterStats Stats() const override { return inner_->Stats(); }
  // Lets every held call and every later one through; once only.
  void Open() { gate_.set_value(); }
  // Calls that reached the gate so far.
  int entered() const { return entered_.load(); }

 private:
  void Hold() {
    if (entered_.fetch_add(1) < held_calls_) opened_.wait();
  }
  tier::L2Adapter* const inner_;
  const Gated gated_;
  const int held_calls_;
  std::promise<void> gate_;
  std::shared_future<void> opened_;
  std::atomic<int> entered_{0};
};

}  // namespace lmcache::testing
