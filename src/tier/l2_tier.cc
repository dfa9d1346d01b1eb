#include "tier/l2_tier.h"

#include <spdlog/spdlog.h>

#include "common/mask_secrets.h"
#include "tier/metered_adapter.h"

namespace lmcache::tier {

L2Tier::L2Tier(store::ObjectTable* table, const L2Environment& environment)
    : table_(table), environment_(environment), cascade_(std::make_unique<L2Cascade>()) {}

Result<std::unique_ptr<L2Tier>> L2Tier::Create(const L2Config& config, store::ObjectTable* table,
                                               const L2Environment& environment) {
  std::unique_ptr<L2Tier> tier(new L2Tier(table, environment));
  for (std::size_t i = 0; i < config.adapters.size(); ++i) {
    const L2AdapterSpec& spec = config.adapters[i];
    const std::string where = "--l2-adapter #" + std::to_string(i + 1) + " (" + spec.type + ")";
    auto adapter = tier->Build(spec);
    if (!adapter.ok()) return Status(adapter.status().code(), where + ": " + adapter.status().message());
    for (const std::string& key : spec.ignored_keys) {
      spdlog::warn("{}: '{}' is accepted for compatibility and has no effect", where, key);
    }
    auto name = tier->cascade_->Insert(std::move(adapter).value(), tier->AdditionOf(spec, std::nullopt));
    if (!name.ok()) return Status(name.status().code(), where + ": " + name.status().message());
    spdlog::info("L2 adapter #{} {}: {}", i + 1, *name,
                 tier->cascade_->Current().member(i).description);
  }
  tier->store_ = std::make_unique<StoreController>(table, tier->cascade_.get(), config.store);
  tier->prefetch_ = std::make_unique<PrefetchController>(table, tier->cascade_.get(), config.prefetch);
  // Always: adapters that take stores may join later; the controller queues
  // nothing while none of the cascade does.
  table->AddListener(tier->store_.get());
  return tier;
}

L2Tier::~L2Tier() { Stop(); }

Result<std::unique_ptr<L2Adapter>> L2Tier::Build(const L2AdapterSpec& spec) const {
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<L2Adapter> made, MakeL2Adapter(spec, environment_));
  auto adapter = std::make_unique<MeteredAdapter>(std::move(made));
  if (Status attached = adapter->AttachMemory(table_->PoolBytes()); !attached.ok()) {
    return Status(attached.code(), "cannot use the L1 pool: " + attached.message());
  }
  adapter->EnforceQuotas(&table_->tenants());
  if (observer_ != nullptr) ReportRemovals(*adapter, adapter->Stats().description);
  return std::unique_ptr<L2Adapter>(std::move(adapter));
}

void L2Tier::ReportRemovals(L2Adapter& adapter, const std::string& location) const {
  adapter.ObserveRemovals([observer = observer_, location](std::span<const store::ObjectKey> keys) {
    observer->OnL2Removed(location, keys);
  });
}

void L2Tier::SetEventObserver(L2EventObserver* observer) {
  observer_ = observer;
  store_->SetEventObserver(observer);
  const L2Cascade::View cascade = cascade_->Current();
  for (std::size_t i = 0; i < cascade.size(); ++i) {
    ReportRemovals(cascade.adapter(i), cascade.member(i).description);
  }
}

Result<std::string> L2Tier::AddAdapter(const L2AdapterSpec& spec,
                                       std::optional<std::size_t> position) {
  // One addition at a time, refused before anything is built: building an
  // fs adapter creates its directory and rebuilds its index (a second
  // adapter over a directory in use would rebuild under the live one).
  MutexLock lock(&add_mu_);
  cascade_->Reap();  // a drained adapter's name and directory are free again
  if (!spec.exclusive.empty()) {
    if (const auto holder = cascade_->Holder(spec.exclusive)) {
      return Status(ErrorCode::kAlreadyExists,
                    "L2 adapter " + *holder + " already stores there (" + spec.exclusive + ")");
    }
  }
  const std::size_t size = cascade_->Current().size();
  if (position && *position > size) {
    return InvalidConfig("position " + std::to_string(*position + 1) +
                         " is past the cascade's end (at most " + std::to_string(size + 1) + ")");
  }
  LMC_ASSIGN_OR_RETURN(std::unique_ptr<L2Adapter> adapter, Build(spec));
  for (const std::string& key : spec.ignored_keys) {
    spdlog::warn("added L2 adapter ({}): '{}' is accepted for compatibility and has no effect",
                 spec.type, key);
  }
  LMC_ASSIGN_OR_RETURN(std::string name,
                       cascade_->Insert(std::move(adapter), AdditionOf(spec, position)));
  cascade_changes_.added.fetch_add(1, std::memory_order_relaxed);
  spdlog::info("L2 adapter {} joined the cascade at position {}", name,
               cascade_->Current().Find(name).value_or(0) + 1);
  return name;
}

Result<L2Cascade::Removal> L2Tier::RemoveAdapter(std::string_view name,
                                                 std::chrono::milliseconds drain_timeout) {
  ReapDrained();
  auto removal = cascade_->Remove(name, drain_timeout);
  if (removal.ok()) cascade_changes_.removed.fetch_add(1, std::memory_order_relaxed);
  return removal;
}

L2Cascade::Addition L2Tier::AdditionOf(const L2AdapterSpec& spec,
                                      std::optional<std::size_t> position) {
  return {.name = spec.name,
          .config = MaskSecrets(spec.source),
          .exclusive = spec.exclusive,
          .position = position,
          .farewell = [this](L2Adapter& leaving) {
            if (observer_ != nullptr) AnnounceRemoved(leaving, leaving.Stats().description);
          }};
}

std::size_t L2Tier::ReapDrained() { return cascade_->Reap(); }

void L2Tier::AnnounceRemoved(L2Adapter& adapter, const std::string& location) const {
  // Pages of the adapter's own listing (fs, mock); an adapter that cannot
  // list (resp) leaves what it held to the routers' own expiry.
  constexpr std::size_t kPage = 65536;
  std::optional<store::ObjectKey> after;
  while (true) {
    auto page = adapter.List(after ? &*after : nullptr, kPage, nullptr);
    if (!page.ok() || page->empty()) return;
    std::vector<store::ObjectKey> keys;
    keys.reserve(page->size());
    for (ListedL2Object& object : *page) keys.push_back(std::move(object.key));
    observer_->OnL2Removed(location, keys);
    if (keys.size() < kPage) return;
    after = keys.back();
  }
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
  const L2Cascade::View cascade = cascade_->Current();
  for (std::size_t i = 0; i < cascade.size(); ++i) {
    s.adapters.push_back(cascade.adapter(i).Stats());
    s.adapters.back().name = cascade.member(i).name;
  }
  cascade_changes_.CopyTo(&s.cascade);
  s.cascade.draining = cascade_->Draining().size();
  s.store = store_->Stats();
  s.prefetch = prefetch_->Stats();
  return s;
}

LMC_STATS_ROWS(L2CascadeStatRows, L2CascadeStats, LMC_L2_CASCADE_STATS)

}  // namespace lmcache::tier
