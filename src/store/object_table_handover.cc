// ObjectTable's handover: the cut a predecessor exports and a successor
// adopts in place (object_table.h, TableImage).
#include <algorithm>
#include <memory>
#include <string>

#include "store/object_table.h"
#include "store/object_table_internal.h"

namespace lmcache::store {
namespace {

// The owner of the read locks a successor keeps on objects a reader held at
// the handover (their readers' leases did not come across).
constexpr std::uint64_t kHandoverOwnerId = ~std::uint64_t{0};

}  // namespace

TableImage ObjectTable::Export() const {
  std::vector<std::unique_ptr<ShardSetLock>> locks;
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    locks.push_back(std::make_unique<ShardSetLock>(*this, s));
  }
  const TimeMs now = clock_->NowMs();
  TableImage image;
  auto adopted = [now](const ObjectKey& key, const ResidentEntry& entry) {
    return AdoptedObject{key, entry.offset, entry.size, entry.locks.IsLocked(now)};
  };
  // The policy's order when it knows every object (LRU does; a policy that
  // keeps no order gives shard order).
  std::size_t resident = 0;
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    shards_[s].mu.AssertHeld();
    resident += shards_[s].resident.size();
  }
  const std::vector<ObjectKey> order =
      policy_->size() == resident ? policy_->Candidates(0, resident) : std::vector<ObjectKey>{};
  for (const ObjectKey& key : order) {
    Shard& shard = ShardOf(key);
    shard.mu.AssertHeld();
    if (auto it = shard.resident.find(key); it != shard.resident.end()) {
      image.resident.push_back(adopted(key, it->second));
    }
  }
  const bool ordered = image.resident.size() == resident;
  if (!ordered) image.resident.clear();
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    Shard& shard = shards_[s];
    shard.mu.AssertHeld();
    if (!ordered) {
      for (const auto& [key, entry] : shard.resident) image.resident.push_back(adopted(key, entry));
    }
    for (const auto& [key, copies] : shard.staging) {
      for (const StagedEntry& e : copies) image.held.push_back({e.offset, e.size});
    }
    for (const RetiredEntry& r : shard.retired) image.held.push_back({r.offset, r.size});
  }
  return image;
}

Result<AdoptionReport> ObjectTable::Adopt(const TableImage& image) {
  const TimeMs now = clock_->NowMs();
  AdoptionReport report;
  std::vector<ObjectKey> pinned;
  const Owner handover = Owner::Internal(kHandoverOwnerId);
  const LeaseId pin_lease = leases_.NewId();
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
    Shard& shard = shards_[s];
    ShardSetLock lock(*this, s);
    shard.mu.AssertHeld();
    shard.resident.reserve(shard.resident.size() + by_shard[s].size());
    for (const AdoptedObject* object : by_shard[s]) {
      const std::size_t before = shard.resident.size();
      auto it = AdmitResident(shard, object->key, object->offset, object->size);
      if (shard.resident.size() == before) {
        return InvalidArgument("adopted object " + object->key.DebugString() + " named twice");
      }
      if (object->read_locked) {
        it->second.locks.Lock(pin_lease, handover, 1, now, config_.read_ttl_ms);
        shard.AddHolder(&it->second);
        pinned.push_back(object->key);
      }
    }
  }
  std::vector<ObjectKey> order;
  order.reserve(image.resident.size());
  for (const AdoptedObject& object : image.resident) order.push_back(object.key);
  // Oldest first in the image; the policy takes a batch's first key as its
  // most recent, so it is handed the image reversed.
  std::reverse(order.begin(), order.end());
  if (!order.empty()) policy_->OnAdmitted(order);
  report.read_locked = pinned.size();
  if (!pinned.empty()) {
    leases_.Add(pin_lease, LeaseRecord{handover, LeaseKind::kRead, std::move(pinned),
                                       now + config_.read_ttl_ms});
  }
  // Held slots are timed copies with no key (RetiredEntry::Ended frees them
  // once the write TTL passes; ReclaimExpired does).
  for (const HeldSlot& slot : image.held) {
    LMC_ASSIGN_OR_RETURN(const std::uint64_t bytes, allocator_->ObjectSize(slot.offset));
    RetiredEntry held;
    held.offset = slot.offset;
    held.size = slot.size;
    held.staged = true;
    held.expires_ms = now + config_.write_ttl_ms;
    Shard& shard = shards_[0];
    ShardSetLock lock(*this, 0);
    shard.mu.AssertHeld();
    shard.retired.push_back(std::move(held));
    report.held_slots += 1;
    report.held_bytes += bytes;
  }
  return report;
}

}  // namespace lmcache::store
