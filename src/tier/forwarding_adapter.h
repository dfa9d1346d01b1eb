// ForwardingAdapter: an L2Adapter that passes every call to the adapter it
// wraps. Decorators (MeteredAdapter, FaultAdapter) derive from it and
// override only the calls they change, so a call added to L2Adapter reaches
// every wrapped adapter through this one class instead of being restated in
// each decorator (LevelDB's EnvWrapper is the model). A lookup has two
// entries (LookupAndLock, and SubmitLookup, which the prefetch controller
// calls): a decorator that changes lookups overrides both, as each forwards
// to the wrapped adapter's own.
//
// Thread-safety: as the wrapped adapter.
#pragma once

#include <memory>

#include "tier/l2_adapter.h"

namespace lmcache::tier {

class ForwardingAdapter : public L2Adapter {
 public:
  explicit ForwardingAdapter(std::unique_ptr<L2Adapter> inner) : inner_(std::move(inner)) {}

  Status AttachMemory(std::span<std::byte> pool) override { return inner_->AttachMemory(pool); }
  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override {
    inner_->SubmitStore(objects, std::move(done));
  }
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override {
    return inner_->LookupAndLock(keys);
  }
  void SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes,
                    LookupDone done) override {
    inner_->SubmitLookup(keys, object_bytes, std::move(done));
  }
  void Unlock(std::span<const store::ObjectKey> keys) override { inner_->Unlock(keys); }
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override {
    inner_->SubmitLoad(reads, std::move(done));
  }
  L2AdapterStats Stats() const override { return inner_->Stats(); }
  bool CompletesAsynchronously() const override { return inner_->CompletesAsynchronously(); }
  bool TakesStores() const override { return inner_->TakesStores(); }
  bool KeepsLoadedObjects() const override { return inner_->KeepsLoadedObjects(); }
  LoadCostMeter* load_cost() override { return inner_->load_cost(); }
  void EnforceQuotas(const store::TenantLedger* ledger) override { inner_->EnforceQuotas(ledger); }
  Result<std::vector<ListedL2Object>> List(const store::ObjectKey* after, std::size_t limit,
                                           const KeyFilter& keep) const override {
    return inner_->List(after, limit, keep);
  }
  Result<std::vector<L2Deletion>> Delete(std::span<const store::ObjectKey> keys,
                                         bool force) override {
    return inner_->Delete(keys, force);
  }
  void ObserveRemovals(RemovalObserver observer) override {
    inner_->ObserveRemovals(std::move(observer));
  }

  L2Adapter& inner() { return *inner_; }
  const L2Adapter& inner() const { return *inner_; }

 private:
  std::unique_ptr<L2Adapter> inner_;
};

}  // namespace lmcache::tier
