// L2 configuration: the adapters of `--l2-adapter '<JSON>'` (repeatable; the
// order is the cascade, reference spec 13.4), checked at startup, and the
// controllers' settings.
//
// The types an adapter can have are registered (l2_adapter_types.h): this
// file knows none of them. Parsing is strict: a value of the wrong type or
// out of range, an unknown `type`, or an unknown key is refused with a message naming the adapter's
// position and the field. Keys the reference accepts that this server does
// not act on (`num_workers`, `read_ahead_size`, ...) are accepted and logged
// as ignored, so a reference deployment's flags start unchanged. `serde`
// takes the reference's `fp8` and our `lossless` (serde_adapter.h); the
// reference's other types (cachegen, the encryptions) are refused by name,
// because silently storing what the operator did not ask for would change
// what they sized or protected.
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <any>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"
#include "tier/l2_adapter.h"
#include "tier/l2_adapter_types.h"
#include "tier/prefetch_controller.h"
#include "tier/serde_adapter.h"
#include "tier/store_controller.h"

namespace lmcache::tier {

struct L2AdapterSpec {
  std::string type;  // as given: "fs", "resp" or "valkey", "mock", "fault_inject", ...
  const L2AdapterType* kind = nullptr;    // the registered type that parsed it
  std::any config;                        // that type's configuration (FsAdapterConfig, ...)
  std::vector<std::string> ignored_keys;  // reference keys accepted without effect
  std::string source;  // the JSON as given (GET /config/adapters shows it, secrets masked)
  std::string name;    // "name": how the cascade names it (empty: <type>#<n>; l2_cascade.h)
  // What no two adapters of a cascade may share (an fs directory, set by its
  // type's parser); empty: nothing.
  std::string exclusive;
  SerdeConfig serde;  // its `serde` block (kRaw: none)
};

// One --l2-adapter value. `position` (1-based) names it in errors.
Result<L2AdapterSpec> ParseL2AdapterSpec(std::string_view json, int position);
// The same, with `where` naming it in errors (a POST /config/adapters).
Result<L2AdapterSpec> ParseL2AdapterSpecAt(std::string_view json, const std::string& where);

// Builds the adapter (the fs adapter creates its directory and rebuilds its index).
Result<std::unique_ptr<L2Adapter>> MakeL2Adapter(const L2AdapterSpec& spec,
                                                 const L2Environment& environment = {});

struct L2Config {
  std::vector<L2AdapterSpec> adapters;
  StoreControllerConfig store;
  PrefetchControllerConfig prefetch;
};

}  // namespace lmcache::tier
