// The `fault_inject` L2 adapter type: its `--l2-adapter` fields and its factory
// (registered through l2_adapter_types.h; src/CMakeLists.txt lists it).
#include "tier/fault/fault_adapter.h"

#include <memory>
#include <string>
#include <vector>

#include "tier/l2_config.h"
#include "tier/l2_config_fields.h"

namespace lmcache::tier {
namespace {

Result<FaultSpec> ParseFault(L2ConfigFields& f, L2AdapterSpec* spec) {
  FaultSpec s;
  LMC_ASSIGN_OR_RETURN(L2AdapterSpec inner, f.Adapter("inner", "the adapter whose operations fail"));
  spec->exclusive = inner.exclusive;  // it stores where its inner adapter does
  s.inner = std::make_shared<L2AdapterSpec>(std::move(inner));
  LMC_ASSIGN_OR_RETURN(s.faults.store_failure_rate, f.Number("store_failure_rate", 0, 0, 1));
  LMC_ASSIGN_OR_RETURN(s.faults.load_failure_rate, f.Number("load_failure_rate", 0, 0, 1));
  LMC_ASSIGN_OR_RETURN(s.faults.lookup_failure_rate, f.Number("lookup_failure_rate", 0, 0, 1));
  LMC_ASSIGN_OR_RETURN(const double delay, f.Number("delay_ms", 0, 0, 60'000));
  s.faults.delay_ms = static_cast<std::uint32_t>(delay);
  LMC_ASSIGN_OR_RETURN(s.faults.delay_rate, f.Number("delay_rate", 1, 0, 1));
  LMC_ASSIGN_OR_RETURN(const double seed, f.Number("seed", 1, 0, 9e15));
  s.faults.seed = static_cast<std::uint64_t>(seed);
  return s;
}

}  // namespace

void RegisterFaultAdapterType(L2AdapterTypes& types) {
  L2AdapterType type = TypedL2AdapterType<FaultSpec>(
      "fault_inject", {},
      [](L2ConfigFields& f, L2AdapterSpec* spec) { return ParseFault(f, spec); }, nullptr);
  // The inner adapter is built with the server's environment (a p2p inner
  // reads the fleet, a serde inner the element types).
  type.make = [](const L2AdapterSpec& spec,
                 const L2Environment& environment) -> Result<std::unique_ptr<L2Adapter>> {
    const auto& fault = std::any_cast<const FaultSpec&>(spec.config);
    LMC_ASSIGN_OR_RETURN(auto inner, MakeL2Adapter(*fault.inner, environment));
    return std::unique_ptr<L2Adapter>(
        std::make_unique<FaultAdapter>(std::move(inner), fault.faults));
  };
  types.Add(std::move(type));
}

}  // namespace lmcache::tier
