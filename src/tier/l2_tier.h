// L2Tier: the slower tiers behind L1, assembled: the adapters of the
// configuration (an L2Cascade, in cascade order, which adapters may join and
// leave at runtime), the store controller listening to the table, and the
// prefetch controller serving lookups (the service's Prefetcher).
//
// Create() builds every configured adapter (an fs adapter rebuilds its
// index) and subscribes the store controller to the table, so it must run
// before the table serves requests. Start() starts the controllers' threads;
// Stop() stops them (prefetches in flight finish, queued stores are dropped
// and counted) and leaves no lock behind.
//
// At runtime (POST and DELETE /config/adapters): AddAdapter builds an
// adapter as Create does (shown the L1 pool, held to the quotas, its
// removals observed) and inserts it; it takes what is admitted from then on
// and serves the lookups that start after it joined. RemoveAdapter takes
// one out: the stores and prefetches in flight on it finish (prefetches that
// start meanwhile look up the rest of the cascade), then it is closed, and
// with KV events on, what it held is announced as removed. Nothing in L1
// is touched.
//
// Thread-safety: Create/SetEventObserver/Start/Stop from the controlling
// thread; AddAdapter, RemoveAdapter, ReapDrained (these three never from a
// request handler: they build and close adapters), cascade(), prefetcher()
// and Stats() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "store/object_table.h"
#include "tier/l2_cascade.h"
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
  void Start();
  void Stop();

  // Builds the adapter `spec` describes and inserts it at `position`
  // (0-based; nullopt: the end); its name. The spec's errors, a name taken,
  // a position past the end, or an adapter that cannot be built refuse it
  // (kInvalidConfig, kAlreadyExists) and change nothing.
  Result<std::string> AddAdapter(const L2AdapterSpec& spec, std::optional<std::size_t> position);
  // Takes the adapter named `name` out and waits up to `drain_timeout` for
  // its in-flight stores and loads (L2Cascade::Remove).
  Result<L2Cascade::Removal> RemoveAdapter(std::string_view name,
                                           std::chrono::milliseconds drain_timeout);

  // Closes the removed adapters that drained since their removal gave up
  // waiting; how many still drain. Not from a request handler: closing an
  // adapter waits for its threads (Stats never reaps, so the stats
  // operation may call it).
  std::size_t ReapDrained();
  const L2Cascade& cascade() const { return *cascade_; }
  Prefetcher* prefetcher() { return prefetch_.get(); }
  StoreController& store_controller() { return *store_; }
  // Each adapter's figures (with its name), in cascade order.
  L2Stats Stats() const;

 private:
  L2Tier(store::ObjectTable* table, const L2Environment& environment);
  // Builds the adapter of `spec`, metered, shown the pool, held to the quotas.
  Result<std::unique_ptr<L2Adapter>> Build(const L2AdapterSpec& spec) const;
  // Tells observer_ (set) what `adapter` drops on its own, as `location`.
  void ReportRemovals(L2Adapter& adapter, const std::string& location) const;
  // How the cascade keeps the adapter of `spec`: its name, its masked
  // JSON, its farewell (AnnounceRemoved).
  L2Cascade::Addition AdditionOf(const L2AdapterSpec& spec, std::optional<std::size_t> position);
  // What the KV events learn when an adapter leaves: everything it listed.
  void AnnounceRemoved(L2Adapter& adapter, const std::string& location) const;

  store::ObjectTable* const table_;
  const L2Environment environment_;
  L2EventObserver* observer_ = nullptr;  // set before Start, then read only
  std::unique_ptr<L2Cascade> cascade_;
  std::unique_ptr<StoreController> store_;
  std::unique_ptr<PrefetchController> prefetch_;
  Mutex add_mu_;  // AddAdapter's, one at a time (held while an adapter is built)
  L2CascadeCounters cascade_changes_;  // adapters added and removed at runtime
};

}  // namespace lmcache::tier
