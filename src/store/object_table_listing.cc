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
    // The shard's first objects after `after`, chosen while it is locked
    // (the window points into its entries) in memory the page bounds.
    ListingWindow window(s == first ? after : nullptr, limit - page.size());
    std::vector<std::pair<ObjectKey, std::uint64_t>> chosen;
    std::vector<const ResidentEntry*> entries;
    {
      ShardSetLock lock(*this, s);
      const ObjectShard& shard = *shards_[s];
      shard.AssertHeld();
      shard.ForEachResidentLocked([&](const ObjectKey& key, const ResidentEntry& entry) {
        if (entry.served_once) return;  // a peer's chunk on its way through, not cached
        if (pinned_only && entry.pins == 0) return;
        if (keep && !keep(key)) return;
        window.Offer(key, entries.size());
        entries.push_back(&entry);
      });
      chosen = window.Take();
      for (auto& [key, index] : chosen) {
        page.push_back({std::move(key), entries[index]->size, entries[index]->pins});
      }
    }
  }
  return page;
}

std::vector<PinOutcome> ObjectTable::Pin(std::span<const ObjectKey> keys) {
  std::vector<PinOutcome> outcomes;
  outcomes.reserve(keys.size());
  std::vector<ObjectKey> first_pins;
  ShardSetLock lock(*this, keys);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const ObjectKey& key = keys[i];
    ObjectShard& shard = lock.ShardOf(i);
    shard.AssertHeld();
    bool first = false;
    outcomes.push_back(shard.PinLocked(key, &first));
    if (first) first_pins.push_back(key);
  }
  // Out of the eviction order while pinned, so evictions never step over
  // them (a pool of pinned objects would make every eviction walk them all).
  if (!first_pins.empty()) policy_->OnRemoved(first_pins);
  return outcomes;
}

std::vector<UnpinOutcome> ObjectTable::Unpin(std::span<const ObjectKey> keys) {
  std::vector<UnpinOutcome> outcomes;
  outcomes.reserve(keys.size());
  std::vector<ObjectKey> unpinned;
  ShardSetLock lock(*this, keys);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const ObjectKey& key = keys[i];
    ObjectShard& shard = lock.ShardOf(i);
    shard.AssertHeld();
    bool last = false;
    outcomes.push_back(shard.UnpinLocked(key, &last));
    if (last) unpinned.push_back(key);
  }
  // Back in the eviction order, as the most recent.
  if (!unpinned.empty()) policy_->OnAdmitted(unpinned);
  return outcomes;
}

}  // namespace lmcache::store
