// The operator's listing and deletion, and the tenants' quotas, for an
// adapter that keeps what it holds in an L2Index (fs, mock, s3): one body of
// each, over the index, with the adapter's own way to delete an object.
//
// Thread-safety: as L2Index (internally synchronised); `remove` runs under
// the index's lock, so a concurrent store of the same key cannot slip
// between the object's removal from the tier and from the index.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "store/tenant_ledger.h"
#include "tier/l2_adapter.h"
#include "tier/l2_index.h"

namespace lmcache::tier {

// L2Adapter::List over `index`.
std::vector<ListedL2Object> ListIndexed(const L2Index& index, const store::ObjectKey* after,
                                        std::size_t limit, const L2Adapter::KeyFilter& keep);

// L2Adapter::Delete over `index`: `remove` deletes one object from the tier.
std::vector<L2Deletion> DeleteIndexed(L2Index& index, std::span<const store::ObjectKey> keys,
                                      bool force, const L2Index::EvictFn& remove);

// L2Adapter::EnforceQuotas over `index` (nothing when quotas are off).
void EnforceIndexedQuotas(L2Index& index, const store::TenantLedger* ledger);

}  // namespace lmcache::tier
