// ObjectTable's handover: the cut a predecessor exports and a successor
// adopts in place (object_table.h, TableImage).
#include <algorithm>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>

#include "store/object_table.h"
#include "store/object_table_internal.h"

namespace lmcache::store {
namespace {

// The owner of the read locks a successor keeps on objects a reader held at
// the handover (their readers' leases did not come across).
constexpr std::uint64_t kHandoverOwnerId = ~std::uint64_t{0};

}  // namespace

TableImage ObjectTable::Export() const {
  // One shard at a time (an object lives in one shard, so each is exported
  // in one state; and TSan's deadlock detector takes at most 64 locks held
  // at once), in the policy's order: its candidates, oldest first, are
  // bucketed by shard and looked up under that shard's lock. An object the
  // policy does not list (a policy that keeps no order, or one admitted
  // meanwhile) follows, as the most recent.
  std::vector<ObjectKey> order = policy_->Candidates(0, policy_->size());
  std::vector<std::vector<std::size_t>> by_shard(num_shards());
  for (std::size_t position = 0; position < order.size(); ++position) {
    by_shard[ShardIndex(order[position])].push_back(position);
  }
  const TimeMs now = clock_->NowMs();
  // Placed at their position in the order (no sort), then compacted.
  std::vector<AdoptedObject> placed(order.size());
  std::vector<bool> found(order.size(), false);
  std::vector<AdoptedObject> unlisted;
  TableImage image;
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    ShardSetLock lock(*this, s);
    ObjectShard& shard = *shards_[s];
    shard.AssertHeld();
    std::vector<const ResidentEntry*> listed;
    listed.reserve(by_shard[s].size());
    for (const std::size_t position : by_shard[s]) {
      if (const ResidentEntry* entry = shard.FindResidentLocked(order[position])) {
        // The key is taken from `order` (found: it is not read again).
        placed[position] = {std::move(order[position]), entry->offset, entry->size,
                            entry->locks.IsLocked(now), std::nullopt};
        found[position] = true;
        listed.push_back(entry);
      }
    }
    if (listed.size() != shard.resident_count_locked()) {  // rare: the walk then pays for a set
      const std::unordered_set<const ResidentEntry*> known(listed.begin(), listed.end());
      shard.ForEachResidentLocked([&](const ObjectKey& key, const ResidentEntry& entry) {
        if (known.contains(&entry)) return;
        unlisted.push_back(
            {key, entry.offset, entry.size, entry.locks.IsLocked(now), std::nullopt});
      });
    }
    shard.ForEachHeldSlotLocked([&image](Offset offset, std::uint64_t size) {
      image.held.push_back({offset, size});
    });
  }
  image.resident.reserve(order.size() + unlisted.size());
  for (std::size_t position = 0; position < order.size(); ++position) {
    if (found[position]) image.resident.push_back(std::move(placed[position]));
  }
  for (AdoptedObject& object : unlisted) image.resident.push_back(std::move(object));
  return image;
}

Result<AdoptionReport> ObjectTable::Adopt(const TableImage& image) {
  const TimeMs now = clock_->NowMs();
  AdoptionReport report;
  std::vector<ObjectKey> kept_locked;
  const Owner handover = Owner::Internal(kHandoverOwnerId);
  const LeaseId handover_lease = leases_.NewId();
  // Checked first, then admitted shard by shard: each shard locked once and
  // its map sized once (a 16 GiB pool of 64 KiB chunks is 196608 objects).
  std::vector<std::vector<const AdoptedObject*>> by_shard(num_shards());
  for (const AdoptedObject& object : image.resident) {
    LMC_RETURN_IF_ERROR(ValidateObjectKey(object.key));
    LMC_ASSIGN_OR_RETURN(const std::uint64_t slot, allocator_->ObjectSize(object.offset));
    if (object.size == 0 || allocator_->AlignedSize(object.size) != slot) {
      return InvalidArgument("adopted object " + object.key.DebugString() + " of " +
                             std::to_string(object.size) + " bytes does not match its " +
                             std::to_string(slot) + "-byte slot");
    }
    by_shard[ShardIndex(object.key)].push_back(&object);
    report.objects += 1;
    report.bytes += slot;
  }
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    if (by_shard[s].empty()) continue;
    ObjectShard& shard = *shards_[s];
    ShardSetLock lock(*this, s);
    shard.AssertHeld();
    shard.ReserveResidentLocked(by_shard[s].size());
    for (const AdoptedObject* object : by_shard[s]) {
      ResidentEntry* entry = shard.AdoptLocked(object->key, object->offset, object->size);
      if (entry == nullptr) {
        return InvalidArgument("adopted object " + object->key.DebugString() + " named twice");
      }
      if (object->read_locked) {
        shard.LockReadLocked(entry, handover_lease, handover, 1, {}, now, config_.read_ttl_ms);
        kept_locked.push_back(object->key);
      }
    }
  }
  // Journaled oldest first, so a recovery from this server's journal keeps
  // the predecessor's eviction order too (it orders by journal sequence).
  if (journal_ != nullptr) {
    for (const AdoptedObject& object : image.resident) {
      journal_->Committed(object.key, object.offset, object.size, object.checksum);
    }
  }
  std::vector<ObjectKey> order;
  order.reserve(image.resident.size());
  for (const AdoptedObject& object : image.resident) order.push_back(object.key);
  // Oldest first in the image; the policy takes a batch's first key as its
  // most recent, so it is handed the image reversed.
  std::reverse(order.begin(), order.end());
  if (!order.empty()) policy_->OnAdmitted(order);
  report.read_locked = kept_locked.size();
  if (!kept_locked.empty()) {
    leases_.Add(handover_lease, LeaseRecord{handover, LeaseKind::kRead, std::move(kept_locked),
                                       now + config_.read_ttl_ms});
  }
  // Held slots are timed copies with no key (ObjectShard::HoldLocked; a
  // reclaim frees them once their hold ends). A hold an earlier recovery set
  // is never extended: repeated crashes would otherwise keep such slots held
  // for as long as the crashes came within a write TTL of each other.
  DeferredFree ended(*this);  // holds an earlier recovery began that have ended: free now
  ObjectShard& holder = *shards_[0];
  ShardSetLock lock(*this, 0);
  holder.AssertHeld();
  for (const HeldSlot& slot : image.held) {
    LMC_ASSIGN_OR_RETURN(const std::uint64_t bytes, allocator_->ObjectSize(slot.offset));
    if (slot.held_until_ms > 0 && slot.held_until_ms <= now) {
      ended.Add(slot.offset);
      report.holds_ended += 1;
      continue;
    }
    const TimeMs fresh = now + config_.write_ttl_ms;
    holder.HoldLocked(slot.offset, slot.size,
                      slot.held_until_ms > 0 ? std::clamp(slot.held_until_ms, now, fresh) : fresh);
    report.held_slots += 1;
    report.held_bytes += bytes;
  }
  return report;
}

}  // namespace lmcache::store
