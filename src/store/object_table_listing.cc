// ObjectTable: listing resident objects page by page, and pins.
#include <algorithm>

#include "store/object_table.h"
#include "store/object_table_internal.h"

namespace lmcache::store {

std::vector<ListedObject> ObjectTable::ListResident(
    const ObjectKey* after, std::size_t limit,
    const std::function<bool(const ObjectKey&)>& keep, bool pinned_only) const {
  std::vector<ListedObject> page;
  if (limit == 0) return page;
  const std::uint32_t first = after == nullptr ? 0 : ShardIndex(*after);
  for (std::uint32_t s = first; s < num_shards() && page.size() < limit; ++s) {
    std::vector<ListedObject> found;
    {
      ShardSetLock lock(*this, s);
      const ObjectShard& shard = *shards_[s];
      shard.AssertHeld();
      shard.ForEachResidentLocked([&](const ObjectKey& key, const ResidentEntry& entry) {
        if (entry.served_once) return;  // a peer's chunk on its way through, not cached
        if (pinned_only && entry.pins == 0) return;
        if (s == first && after != nullptr && !ListingLess(*after, key)) return;
        if (keep && !keep(key)) return;
        found.push_back({key, entry.size, entry.pins});
      });
    }
    // The shard's first objects after `after`, in order.
    const std::size_t take = std::min(found.size(), limit - page.size());
    auto less = [](const ListedObject& a, const ListedObject& b) { return ListingLess(a.key, b.key); };
    std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(take), found.end(),
                      less);
    std::move(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(take),
              std::back_inserter(page));
  }
  return page;
}

std::vector<PinOutcome> ObjectTable::Pin(std::span<const ObjectKey> keys) {
  std::vector<PinOutcome> outcomes;
  outcomes.reserve(keys.size());
  ShardSetLock lock(*this, keys);
  for (const ObjectKey& key : keys) {
    ObjectShard& shard = ShardOf(key);
    shard.AssertHeld();
    outcomes.push_back(shard.PinLocked(key));
  }
  return outcomes;
}

std::vector<UnpinOutcome> ObjectTable::Unpin(std::span<const ObjectKey> keys) {
  std::vector<UnpinOutcome> outcomes;
  outcomes.reserve(keys.size());
  ShardSetLock lock(*this, keys);
  for (const ObjectKey& key : keys) {
    ObjectShard& shard = ShardOf(key);
    shard.AssertHeld();
    outcomes.push_back(shard.UnpinLocked(key));
  }
  return outcomes;
}

}  // namespace lmcache::store
