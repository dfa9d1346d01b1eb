// MockAdapter: an in-memory L2 tier with a simulated capacity and bandwidth
// (`{"type":"mock","max_size_gb":..,"mock_bandwidth_gb":..}`), for tests and
// benchmarks. Objects are kept with their header (object_format.h) and
// verified on load like a real tier's.
//
// Thread-safety: internally synchronised.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "tier/indexed_adapter.h"
#include "tier/l2_adapter.h"
#include "tier/l2_index.h"

namespace lmcache::tier {

struct MockAdapterConfig {
  std::uint64_t max_size_bytes = 0;  // 0 = unbounded
  double bandwidth_gb_per_s = 0;     // 0 = as fast as memory
};

class MockAdapter final : public BlockingL2Adapter {
 public:
  explicit MockAdapter(const MockAdapterConfig& config);

  // Records the pool it was shown (attached_bytes()); registers nothing.
  Status AttachMemory(std::span<std::byte> pool) override;
  std::vector<Status> StoreNow(std::span<const L2Write> objects) override;
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override;
  void Unlock(std::span<const store::ObjectKey> keys) override;
  std::vector<L2LoadOutcome> LoadNow(std::span<const L2Read> reads) override;
  L2AdapterStats Stats() const override;
  Result<std::vector<ListedL2Object>> List(const store::ObjectKey* after, std::size_t limit,
                                           const KeyFilter& keep) const override {
    return ListIndexed(index_, after, limit, keep);
  }
  Result<std::vector<L2Deletion>> Delete(std::span<const store::ObjectKey> keys,
                                         bool force) override;
  void EnforceQuotas(const store::TenantLedger* ledger) override {
    EnforceIndexedQuotas(index_, ledger);
  }

  // Test hook: flips one payload byte of a held object (false if not held).
  bool CorruptForTest(const store::ObjectKey& key);
  // The size of the pool AttachMemory showed it (0: not called).
  std::uint64_t attached_bytes() const { return attached_bytes_.load(); }

 private:
  // Sleeps as long as moving `bytes` takes at the simulated bandwidth.
  void Transfer(std::uint64_t bytes) const;

  const MockAdapterConfig config_;
  L2Index index_;
  L2Counters counters_;
  std::atomic<std::uint64_t> attached_bytes_{0};
  mutable Mutex mu_;  // after index_'s mutex is released; a leaf
  std::unordered_map<store::ObjectKey, std::string, store::ObjectKeyHash> objects_
      LMC_GUARDED_BY(mu_);
};

}  // namespace lmcache::tier
