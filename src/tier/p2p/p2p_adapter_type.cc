// The `p2p` L2 adapter type: `{"type": "p2p"}` places the peers in the
// cascade where the operator lists it; with --p2p-peers and no such entry
// the server puts it first (daemon/config.cc). It has no fields of its own:
// its deadlines are the reference's flags, --p2p-lookup-timeout and
// --p2p-load-timeout (fleet/fleet_link.h, FleetLink).
#include "tier/p2p/p2p_adapter.h"

#include <memory>

#include "tier/l2_config.h"
#include "tier/l2_config_fields.h"

namespace lmcache::tier {

void RegisterP2pAdapterType(L2AdapterTypes& types) {
  types.Add(L2AdapterType{
      "p2p",
      {},
      [](L2ConfigFields&, L2AdapterSpec*) { return Status::Ok(); },
      [](const L2AdapterSpec&, const L2Environment& environment)
          -> Result<std::unique_ptr<L2Adapter>> {
        if (environment.fleet == nullptr) {
          return Status(ErrorCode::kInvalidConfig,
                        "the p2p adapter reads from the peers of --p2p-peers: turn P2P on "
                        "(--p2p-advertise-url, --p2p-auth-key-file) or remove it");
        }
        return std::unique_ptr<L2Adapter>(std::make_unique<P2pAdapter>(environment.fleet));
      }});
}

}  // namespace lmcache::tier
