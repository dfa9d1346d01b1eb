// GatedAdapter: an L2 adapter whose store or load calls block until the test
// opens its gate, as a hung backend would (a Redis node that stopped
// answering, a network disk that froze). Everything else goes straight to
// the adapter it wraps.
//
// Thread-safety: as the wrapped adapter; Open() and entered() from any thread.
#pragma once

#include <atomic>
#include <future>
#include <span>
#include <vector>

#include "tier/l2_adapter.h"

namespace lmcache::testing {

class GatedAdapter final : public tier::L2Adapter {
 public:
  enum class Gated { kStore, kLoad };
  GatedAdapter(tier::L2Adapter* inner, Gated gated)
      : inner_(inner), gated_(gated), opened_(gate_.get_future().share()) {}
  std::vector<Status> Store(std::span<const tier::L2Write> objects) override {
    if (gated_ == Gated::kStore) Hold();
    return inner_->Store(objects);
  }
  std::vector<bool> LookupAndPin(std::span<const store::ObjectKey> keys) override {
    return inner_->LookupAndPin(keys);
  }
  void Unpin(std::span<const store::ObjectKey> keys) override { inner_->Unpin(keys); }
  std::vector<tier::L2LoadOutcome> Load(std::span<const tier::L2Read> reads) override {
    if (gated_ == Gated::kLoad) Hold();
    return inner_->Load(reads);
  }
  tier::L2AdapterStats Stats() const override { return inner_->Stats(); }
  // Lets every held call and every later one through; once only.
  void Open() { gate_.set_value(); }
  // Calls that reached the gate so far.
  int entered() const { return entered_.load(); }

 private:
  void Hold() {
    entered_.fetch_add(1);
    opened_.wait();
  }
  tier::L2Adapter* const inner_;
  const Gated gated_;
  std::promise<void> gate_;
  std::shared_future<void> opened_;
  std::atomic<int> entered_{0};
};

}  // namespace lmcache::testing
