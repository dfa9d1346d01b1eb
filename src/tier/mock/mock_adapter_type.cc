// The `mock` L2 adapter type: its `--l2-adapter` fields and its factory
// (registered through l2_adapter_types.h; src/CMakeLists.txt lists it).
#include "tier/mock/mock_adapter.h"

#include <memory>
#include <string>
#include <vector>

#include "tier/l2_config.h"
#include "tier/l2_config_fields.h"

namespace lmcache::tier {
namespace {

Result<MockAdapterConfig> ParseMock(L2ConfigFields& f) {
  MockAdapterConfig c;
  LMC_ASSIGN_OR_RETURN(const double gb, f.Number("max_size_gb", 0, 0, 1e6));
  c.max_size_bytes = static_cast<std::uint64_t>(gb * kConfigGiB);
  LMC_ASSIGN_OR_RETURN(c.bandwidth_gb_per_s, f.Number("mock_bandwidth_gb", 0, 0, 1e4));
  return c;
}

}  // namespace

void RegisterMockAdapterType(L2AdapterTypes& types) {
  types.Add(TypedL2AdapterType<MockAdapterConfig>(
      "mock", {}, [](L2ConfigFields& f, L2AdapterSpec*) { return ParseMock(f); },
      [](const MockAdapterConfig& config) -> Result<std::unique_ptr<L2Adapter>> {
        return std::unique_ptr<L2Adapter>(std::make_unique<MockAdapter>(config));
      }));
}

}  // namespace lmcache::tier
