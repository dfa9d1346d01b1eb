// L2EventObserver: told which objects each L2 adapter came to hold (the
// store controller, after an adapter stored them) and which it lost (the
// adapter's own eviction, or a corrupt object it deleted). The KV event log
// listens, so routers learn what the node's slower tiers hold.
//
// Thread-safety: callbacks run on the store controller's workers and on
// the threads of the adapters' calls, possibly many at once, under no lock
// of the table (an adapter may hold its own index lock); they must be quick
// and must not call back into the adapter.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "store/object_key.h"

namespace lmcache::tier {

class L2EventObserver {
 public:
  virtual ~L2EventObserver() = default;
  // `location` is what the adapter stores to (L2CascadeMember::description).
  virtual void OnL2Stored(const std::string& location, std::span<const store::ObjectKey> keys) = 0;
  virtual void OnL2Removed(const std::string& location, std::span<const store::ObjectKey> keys) = 0;
};

}  // namespace lmcache::tier
