// L2Tier: the slower tiers behind L1, assembled: the adapters of the
// configuration (in cascade order), the store controller listening to the
// table, and the prefetch controller serving lookups (the service's
// Prefetcher).
//
// Create() builds every adapter (an fs adapter rebuilds its index) and
// subscribes the store controller to the table, so it must run before the
// table serves requests. Start() starts the controllers' threads; Stop()
// stops them (prefetches in flight finish, queued stores are dropped and
// counted) and leaves no lock behind.
//
// Thread-safety: Create/Start/Stop from the controlling thread; prefetcher()
// and Stats() from any thread.
#pragma once

#include <memory>
#include <vector>

#include "store/object_table.h"
#include "tier/l2_config.h"
#include "tier/l2_event_observer.h"
#include "tier/tier_stats.h"

namespace lmcache::tier {

class L2Tier {
 public:
  // `table` must outlive the tier. Fails when an adapter cannot be built.
  // `environment` is what adapters may need from the server (the fleet).
  static Result<std::unique_ptr<L2Tier>> Create(const L2Config& config, store::ObjectTable* table,
                                                const L2Environment& environment = {});
  ~L2Tier();  // stops

  // Tells `observer` what each adapter stores and drops (once, before Start).
  void SetEventObserver(L2EventObserver* observer);
  // Each adapter's description ("fs:/data/l2"), in cascade order.
  std::vector<std::string> AdapterDescriptions() const;
  void Start();
  void Stop();
  Prefetcher* prefetcher() { return prefetch_.get(); }
  StoreController& store_controller() { return *store_; }
  L2Adapter& adapter(std::size_t i) { return *adapters_[i]; }
  std::size_t adapter_count() const { return adapters_.size(); }
  L2Stats Stats() const;

 private:
  L2Tier() = default;
  std::vector<std::unique_ptr<L2Adapter>> adapters_;
  std::unique_ptr<StoreController> store_;
  std::unique_ptr<PrefetchController> prefetch_;
};

}  // namespace lmcache::tier
