#include "tier/l2_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "tier/metered_adapter.h"

namespace lmcache::tier {

Result<std::unique_ptr<L2Tier>> L2Tier::Create(const L2Config& config, store::ObjectTable* table,
                                               const L2Environment& environment) {
  std::unique_ptr<L2Tier> tier(new L2Tier());
  std::vector<L2Adapter*> adapters;
  for (std::size_t i = 0; i < config.adapters.size(); ++i) {
    const L2AdapterSpec& spec = config.adapters[i];
    auto adapter = MakeL2Adapter(spec, environment);
    if (!adapter.ok()) {
      return Status(adapter.status().code(), "--l2-adapter #" + std::to_string(i + 1) + " (" +
                                                 spec.type + "): " + adapter.status().message());
    }
    for (const std::string& key : spec.ignored_keys) {
      spdlog::warn("--l2-adapter #{} ({}): '{}' is accepted for compatibility and has no effect",
                   i + 1, spec.type, key);
    }
    tier->adapters_.push_back(std::make_unique<MeteredAdapter>(std::move(adapter).value()));
    if (Status attached = tier->adapters_.back()->AttachMemory(table->PoolBytes()); !attached.ok()) {
      return Status(attached.code(), "--l2-adapter #" + std::to_string(i + 1) + " (" + spec.type +
                                         ") cannot use the L1 pool: " + attached.message());
    }
    tier->adapters_.back()->EnforceQuotas(&table->tenants());
    adapters.push_back(tier->adapters_.back().get());
    spdlog::info("L2 adapter #{}: {}", i + 1, tier->adapters_.back()->Stats().description);
  }
  tier->store_ = std::make_unique<StoreController>(table, adapters, config.store);
  tier->prefetch_ = std::make_unique<PrefetchController>(table, adapters, config.prefetch);
  // Only where an adapter takes stores: with the peers alone, no object
  // is stored anywhere, so none may count as stored (nor leave L1 under
  // skip_l1).
  if (std::any_of(adapters.begin(), adapters.end(), [](L2Adapter* a) { return a->TakesStores(); })) {
    table->AddListener(tier->store_.get());
  }
  return tier;
}

L2Tier::~L2Tier() { Stop(); }

void L2Tier::SetEventObserver(L2EventObserver* observer) {
  store_->SetEventObserver(observer);
  for (std::size_t i = 0; i < adapters_.size(); ++i) {
    adapters_[i]->ObserveRemovals([observer, i](std::span<const store::ObjectKey> keys) {
      observer->OnL2Removed(i, keys);
    });
  }
}

std::vector<std::string> L2Tier::AdapterDescriptions() const {
  std::vector<std::string> out;
  for (const auto& adapter : adapters_) out.push_back(adapter->Stats().description);
  return out;
}

void L2Tier::Start() {
  store_->Start();
  prefetch_->Start();
}

void L2Tier::Stop() {
  if (prefetch_) prefetch_->Stop();
  if (store_) store_->Stop();
}

L2Stats L2Tier::Stats() const {
  L2Stats s;
  for (const auto& adapter : adapters_) s.adapters.push_back(adapter->Stats());
  s.store = store_->Stats();
  s.prefetch = prefetch_->Stats();
  return s;
}

}  // namespace lmcache::tier
