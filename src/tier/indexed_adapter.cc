#include "tier/indexed_adapter.h"

namespace lmcache::tier {

std::vector<ListedL2Object> ListIndexed(const L2Index& index, const store::ObjectKey* after,
                                        std::size_t limit, const L2Adapter::KeyFilter& keep) {
  std::vector<ListedL2Object> out;
  for (auto& [key, bytes] : index.List(after, limit, keep)) out.push_back({std::move(key), bytes});
  return out;
}

std::vector<L2Deletion> DeleteIndexed(L2Index& index, std::span<const store::ObjectKey> keys,
                                      bool force, const L2Index::EvictFn& remove) {
  std::vector<L2Deletion> outcomes;
  outcomes.reserve(keys.size());
  for (const store::ObjectKey& key : keys) {
    switch (index.Remove(key, force, remove)) {
      case L2Index::Removal::kRemoved: outcomes.push_back(L2Deletion::kDeleted); break;
      case L2Index::Removal::kLocked: outcomes.push_back(L2Deletion::kLocked); break;
      case L2Index::Removal::kAbsent: outcomes.push_back(L2Deletion::kNotFound); break;
    }
  }
  return outcomes;
}

void EnforceIndexedQuotas(L2Index& index, const store::TenantLedger* ledger) {
  if (ledger == nullptr || !ledger->enabled()) return;
  index.SetLimits([ledger](std::string_view salt) { return ledger->LimitFor(salt); });
}

}  // namespace lmcache::tier
