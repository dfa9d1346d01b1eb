// ObjectShard: one key's transitions (object_shard.h).
#include "store/object_shard.h"

#include <algorithm>
#include <limits>

#include "store/object_table.h"

namespace lmcache::store {

// --- entries ------------------------------------------------------------------------------

ResidentEntry* ObjectShard::AdmitResidentLocked(const ObjectKey& key, Offset offset,
                                                std::uint64_t size) {
  auto [it, inserted] = resident_.try_emplace(key);
  if (!inserted) return nullptr;
  FillResidentLocked(&it->second, offset, size);
  return &it->second;
}

void ObjectShard::FillResidentLocked(ResidentEntry* entry, Offset offset, std::uint64_t size) {
  entry->offset = offset;
  entry->size = size;
  resident_bytes_ += Aligned(size);
}

void ObjectShard::EraseResidentLocked(const ObjectKey& key, ResidentEntry* entry) {
  // Out of the index, never to be recovered (a lease may still read it).
  if (context_->journal != nullptr) context_->journal->Withdrawn(entry->offset);
  if (entry->served_once) served_once_.erase(key);
  resident_bytes_ -= Aligned(entry->size);
  CreditTenant(key, entry->size);
  if (entry->pins > 0) {
    pinned_objects_ -= 1;
    pinned_bytes_ -= Aligned(entry->size);
    context_->pinned_bytes->fetch_sub(Aligned(entry->size), std::memory_order_acq_rel);
  }
  RemoveHolderLocked(entry);
  resident_.erase(key);
}

std::optional<StagedCopy> ObjectShard::TakeStagedLocked(
    const ObjectKey& key, const std::function<bool(const StagedCopy&)>& match) {
  auto it = staged_.find(key);
  if (it == staged_.end()) return std::nullopt;
  auto copy = std::find_if(it->second.begin(), it->second.end(), match);
  if (copy == it->second.end()) return std::nullopt;
  StagedCopy taken = *copy;
  it->second.erase(copy);
  if (it->second.empty()) staged_.erase(it);
  return taken;
}

StagedCopy* ObjectShard::FindStagedLocked(const ObjectKey& key, const Owner& owner) {
  auto it = staged_.find(key);
  if (it == staged_.end()) return nullptr;
  for (StagedCopy& copy : it->second) {
    if (copy.owner == owner) return &copy;
  }
  return nullptr;
}

bool ObjectShard::FreeAbandonedLocked(const ObjectKey& key, LeaseId lease,
                                      std::vector<Offset>* to_free) {
  if (lease == kNoLease) return false;  // a held slot ends only with time
  auto it = std::find_if(abandoned_.begin(), abandoned_.end(),
                         [&](const AbandonedCopy& a) { return a.lease == lease && a.key == key; });
  if (it == abandoned_.end()) return false;
  to_free->push_back(it->offset);
  abandoned_.erase(it);
  return true;
}

void ObjectShard::AddHolderLocked(ResidentEntry* entry) {
  if (entry->holder) return;
  entry->holder = true;
  entry->holder_prev = nullptr;
  entry->holder_next = holders_;
  if (holders_ != nullptr) holders_->holder_prev = entry;
  holders_ = entry;
}

void ObjectShard::RemoveHolderLocked(ResidentEntry* entry) {
  if (!entry->holder) return;
  entry->holder = false;
  if (entry->holder_prev != nullptr) {
    entry->holder_prev->holder_next = entry->holder_next;
  } else {
    holders_ = entry->holder_next;
  }
  if (entry->holder_next != nullptr) entry->holder_next->holder_prev = entry->holder_prev;
  entry->holder_prev = entry->holder_next = nullptr;
}

// --- writes -------------------------------------------------------------------------------

ReserveStep ObjectShard::ReserveLocked(const ObjectKey& key, const Owner& owner, std::uint64_t size,
                                       LeaseId lease, TimeMs expires_ms,
                                       std::optional<Offset> offered,
                                       std::vector<Offset>* to_free) {
  if (resident_.contains(key)) {
    if (offered) to_free->push_back(*offered);
    return {ReserveState::kResident, 0};
  }
  if (StagedCopy* mine = FindStagedLocked(key, owner); mine != nullptr) {
    if (mine->size == size) {
      // A repeated reservation by the same writer gets its buffer back (the
      // reference leaks the first one until its TTL, spec 17.11); the copy
      // moves to the new lease.
      if (offered) to_free->push_back(*offered);
      mine->lease = lease;
      mine->expires_ms = expires_ms;
      return {ReserveState::kReserved, mine->offset};
    }
    // Same writer, new size: start over.
    to_free->push_back(mine->offset);
    CreditTenant(key, mine->size);
    (void)TakeStagedLocked(key, [&owner](const StagedCopy& c) { return c.owner == owner; });
  }
  if (!offered) return {ReserveState::kNeedsMemory, 0};
  if (context_->ledger != nullptr && !context_->ledger->TryCharge(key.cache_salt, Aligned(size))) {
    to_free->push_back(*offered);
    return {ReserveState::kOverQuota, 0};
  }
  staged_[key].push_back({lease, owner, *offered, size, expires_ms});
  return {ReserveState::kReserved, *offered};
}

AdmitStep ObjectShard::AdmitLocked(const ObjectKey& key, LeaseId lease, TimeMs now,
                                   std::vector<Offset>* to_free) {
  std::optional<StagedCopy> copy =
      TakeStagedLocked(key, [lease](const StagedCopy& c) { return c.lease == lease; });
  if (!copy) {
    // A forced delete may have abandoned this lease's copy: it ends here.
    FreeAbandonedLocked(key, lease, to_free);
    return {WriteOutcome::kNotStaged, FindResidentLocked(key)};
  }
  if (now >= copy->expires_ms) {
    to_free->push_back(copy->offset);
    CreditTenant(key, copy->size);
    return {WriteOutcome::kLeaseExpired, FindResidentLocked(key)};
  }
  // One probe finds another writer's copy or makes room for this one (at
  // chunk size 1 every probe of a large index is a cache miss or more).
  auto [it, inserted] = resident_.try_emplace(key);
  if (!inserted) {
    to_free->push_back(copy->offset);
    CreditTenant(key, copy->size);
    return {WriteOutcome::kDuplicateDiscarded, &it->second};
  }
  // Filled first: should the journal throw, the entry already names its
  // slot. Recorded before any reader can learn of it (the shard is locked).
  FillResidentLocked(&it->second, copy->offset, copy->size);
  if (context_->journal != nullptr)
    context_->journal->Committed(key, copy->offset, copy->size, std::nullopt);
  return {WriteOutcome::kAdmitted, &it->second, Aligned(copy->size)};
}

bool ObjectShard::AbortLocked(const ObjectKey& key, LeaseId lease, std::vector<Offset>* to_free) {
  if (auto copy =
          TakeStagedLocked(key, [lease](const StagedCopy& c) { return c.lease == lease; })) {
    to_free->push_back(copy->offset);
    CreditTenant(key, copy->size);
    return true;
  }
  return FreeAbandonedLocked(key, lease, to_free);
}

// --- reads --------------------------------------------------------------------------------

ResidentEntry* ObjectShard::FindResidentLocked(const ObjectKey& key) {
  auto it = resident_.find(key);
  return it == resident_.end() ? nullptr : &it->second;
}

bool ObjectShard::LockReadLocked(ResidentEntry* entry, LeaseId lease, const Owner& owner,
                                 std::uint32_t count, std::span<const LeaseId> consume, TimeMs now,
                                 TimeMs ttl_ms) {
  bool consumed = false;
  for (const LeaseId from : consume) {
    if (entry->locks.Transfer(from, lease, owner, now, ttl_ms)) {
      consumed = true;
      count -= 1;
      break;
    }
  }
  if (count > 0) entry->locks.Lock(lease, owner, count, now, ttl_ms);
  AddHolderLocked(entry);
  return consumed;
}

void ObjectShard::MarkServedOnceLocked(const ObjectKey& key, ResidentEntry* entry) {
  entry->served_once = true;
  served_once_.insert(key);
}

void ObjectShard::DropServedOnceLocked(const ObjectKey& key, ResidentEntry* entry,
                                       std::vector<Offset>* to_free) {
  to_free->push_back(entry->offset);
  EraseResidentLocked(key, entry);
  if (context_->served_once_dropped != nullptr) {
    context_->served_once_dropped->fetch_add(1, std::memory_order_relaxed);
  }
}

std::uint32_t ObjectShard::UnlockReadLocked(const ObjectKey& key, LeaseId lease,
                                            std::uint32_t count, TimeMs now,
                                            std::vector<Offset>* to_free) {
  if (ResidentEntry* entry = FindResidentLocked(key); entry != nullptr) {
    // Still linked among the lock holders: AddStatsLocked unlinks it
    // (unlinking here would touch its neighbours, two cache misses a key).
    const std::uint32_t released = entry->locks.Unlock(lease, count, now);
    if (entry->served_once && !entry->locks.IsLocked(now)) DropServedOnceLocked(key, entry, to_free);
    return released;
  }
  // A reader of a force-deleted object releases the retired copy.
  for (auto r = retired_.begin(); r != retired_.end(); ++r) {
    if (!(r->key == key) || r->locks.LeaseCount(lease, now) == 0) continue;
    const std::uint32_t released = r->locks.Unlock(lease, count, now);
    if (!r->locks.IsLocked(now)) {
      to_free->push_back(r->offset);
      retired_.erase(r);
    }
    return released;
  }
  return 0;
}

// --- removal ------------------------------------------------------------------------------

DeleteStep ObjectShard::DeleteLocked(const ObjectKey& key, bool force, TimeMs now,
                                     std::vector<Offset>* to_free) {
  auto staged = staged_.find(key);
  if (staged != staged_.end()) {  // expired writer copies go in any case
    std::erase_if(staged->second, [&](const StagedCopy& c) {
      if (now < c.expires_ms) return false;
      to_free->push_back(c.offset);
      CreditTenant(key, c.size);
      return true;
    });
    if (staged->second.empty()) {
      staged_.erase(staged);
      staged = staged_.end();
    }
  }
  ResidentEntry* resident = FindResidentLocked(key);
  const bool resident_locked = resident != nullptr && resident->locks.IsLocked(now);
  const bool staged_live = staged != staged_.end();
  if (resident == nullptr && !staged_live) return {DeleteOutcome::kNotFound};
  if (!force && (resident_locked || staged_live)) return {DeleteOutcome::kLocked};
  DeleteStep step{DeleteOutcome::kDeleted};
  if (resident != nullptr) {
    if (resident_locked) {
      retired_.push_back({key, resident->offset, resident->size, resident->locks});
    } else {
      to_free->push_back(resident->offset);
    }
    step.removed_resident = true;
    step.aligned_bytes = Aligned(resident->size);
    EraseResidentLocked(key, resident);
  }
  if (staged_live) {
    for (const StagedCopy& c : staged->second) {
      abandoned_.push_back({key, c.offset, c.size, c.lease, c.expires_ms});
      CreditTenant(key, c.size);
    }
    staged_.erase(staged);
  }
  return step;
}

PinOutcome ObjectShard::PinLocked(const ObjectKey& key, bool* first) {
  *first = false;
  ResidentEntry* entry = FindResidentLocked(key);
  if (entry == nullptr || entry->served_once) return PinOutcome::kNotResident;
  if (entry->pins == std::numeric_limits<std::uint32_t>::max()) return PinOutcome::kOverLimit;
  if (entry->pins == 0) {
    *first = true;
    const std::uint64_t bytes = Aligned(entry->size);
    std::uint64_t pinned = context_->pinned_bytes->load(std::memory_order_acquire);
    do {
      if (bytes > context_->pinned_limit_bytes - std::min(pinned, context_->pinned_limit_bytes)) {
        return PinOutcome::kOverLimit;
      }
    } while (!context_->pinned_bytes->compare_exchange_weak(pinned, pinned + bytes,
                                                            std::memory_order_acq_rel));
    pinned_objects_ += 1;
    pinned_bytes_ += bytes;
  }
  entry->pins += 1;
  return PinOutcome::kPinned;
}

UnpinOutcome ObjectShard::UnpinLocked(const ObjectKey& key, bool* last) {
  *last = false;
  ResidentEntry* entry = FindResidentLocked(key);
  if (entry == nullptr || entry->pins == 0) return UnpinOutcome::kNotPinned;
  entry->pins -= 1;
  if (entry->pins == 0) {
    *last = true;
    const std::uint64_t bytes = Aligned(entry->size);
    pinned_objects_ -= 1;
    pinned_bytes_ -= bytes;
    context_->pinned_bytes->fetch_sub(bytes, std::memory_order_acq_rel);
  }
  return UnpinOutcome::kUnpinned;
}

EvictStep ObjectShard::EvictLocked(const ObjectKey& key, TimeMs now, std::vector<Offset>* to_free) {
  ResidentEntry* entry = FindResidentLocked(key);
  if (entry == nullptr) return {EvictState::kAbsent};
  if (entry->locks.IsLocked(now) || entry->pins > 0) return {EvictState::kLocked};
  const std::uint64_t aligned = Aligned(entry->size);
  to_free->push_back(entry->offset);
  EraseResidentLocked(key, entry);
  return {EvictState::kEvicted, aligned};
}

ReclaimStep ObjectShard::ReclaimLocked(TimeMs now, std::vector<Offset>* to_free) {
  ReclaimStep step;
  for (auto it = staged_.begin(); it != staged_.end();) {
    std::vector<StagedCopy>& copies = it->second;
    for (auto c = copies.begin(); c != copies.end();) {
      if (now < c->expires_ms) {
        ++c;
        continue;
      }
      step.expired_writes += 1;
      CreditTenant(it->first, c->size);
      if (c->owner.kind == OwnerKind::kInstance) {
        // Its worker may still be copying into it (fail-stop: fence, then
        // release; here the fence is the worker's own end).
        quarantined_.push_back({c->offset, c->size, c->owner});
        step.quarantined += 1;
      } else {
        to_free->push_back(c->offset);
      }
      c = copies.erase(c);
    }
    if (copies.empty()) {
      staged_.erase(it++);  // the other iterators stay valid
    } else {
      ++it;
    }
  }
  std::erase_if(retired_, [&](const RetiredObject& r) {
    if (r.locks.IsLocked(now)) return false;
    to_free->push_back(r.offset);
    return true;
  });
  // Served once, every lease of theirs expired. Collected first (dropping
  // one erases it from served_once_); entries of resident_ never move.
  std::vector<std::pair<ObjectKey, ResidentEntry*>> unread;
  for (const ObjectKey& key : served_once_) {
    ResidentEntry* entry = FindResidentLocked(key);
    if (!entry->locks.IsLocked(now)) unread.emplace_back(key, entry);
  }
  for (auto& [key, entry] : unread) DropServedOnceLocked(key, entry, to_free);
  std::erase_if(abandoned_, [&](const AbandonedCopy& a) {
    if (now < a.expires_ms) return false;
    to_free->push_back(a.offset);
    return true;
  });
  return step;
}

std::uint64_t ObjectShard::ReleaseQuarantinedLocked(const Owner& writer,
                                                    std::vector<Offset>* to_free) {
  return std::erase_if(quarantined_, [&](const QuarantinedCopy& q) {
    if (!(q.writer == writer)) return false;
    to_free->push_back(q.offset);
    return true;
  });
}

// --- handover -----------------------------------------------------------------------------

ResidentEntry* ObjectShard::AdoptLocked(const ObjectKey& key, Offset offset, std::uint64_t size) {
  ResidentEntry* entry = AdmitResidentLocked(key, offset, size);
  // Charged whatever its quota: the predecessor held it already.
  if (entry != nullptr && context_->ledger != nullptr) {
    context_->ledger->Charge(key.cache_salt, Aligned(size));
  }
  return entry;
}

void ObjectShard::HoldLocked(Offset offset, std::uint64_t size, TimeMs until_ms) {
  if (context_->journal != nullptr) context_->journal->Held(offset, size, until_ms);
  abandoned_.push_back({ObjectKey{}, offset, size, kNoLease, until_ms});
}

void ObjectShard::ForEachResidentLocked(
    const std::function<void(const ObjectKey&, const ResidentEntry&)>& visit) const {
  for (const auto& [key, entry] : resident_) visit(key, entry);
}

void ObjectShard::ForEachHeldSlotLocked(
    const std::function<void(Offset, std::uint64_t)>& visit) const {
  for (const auto& [key, copies] : staged_) {
    for (const StagedCopy& c : copies) visit(c.offset, c.size);
  }
  for (const RetiredObject& r : retired_) visit(r.offset, r.size);
  for (const AbandonedCopy& a : abandoned_) visit(a.offset, a.size);
  for (const QuarantinedCopy& q : quarantined_) visit(q.offset, q.size);
}

// --- inspection ---------------------------------------------------------------------------

std::optional<ObjectInfo> ObjectShard::FindLocked(const ObjectKey& key, TimeMs now) const {
  if (auto it = resident_.find(key); it != resident_.end()) {
    return ObjectInfo{ObjectState::kResident, it->second.offset, it->second.size,
                      it->second.locks.count(now), it->second.locks.holds(now)};
  }
  if (auto it = staged_.find(key); it != staged_.end() && !it->second.empty()) {
    const StagedCopy& c = it->second.front();
    return ObjectInfo{ObjectState::kStaging, c.offset, c.size, 0, 0};
  }
  return std::nullopt;
}

std::vector<ObjectKey> ObjectShard::KeysLocked() const {
  std::vector<ObjectKey> keys;
  keys.reserve(resident_.size() + staged_.size());
  for (const auto& [key, entry] : resident_) keys.push_back(key);
  for (const auto& [key, copies] : staged_) {
    if (!resident_.contains(key)) keys.push_back(key);
  }
  return keys;
}

void ObjectShard::AddStatsLocked(TimeMs now, TableStats* stats) {
  stats->resident_objects += resident_.size();
  stats->resident_bytes += resident_bytes_;
  stats->pinned_objects += pinned_objects_;
  stats->pinned_bytes += pinned_bytes_;
  stats->served_once_objects += served_once_.size();
  for (ResidentEntry* entry = holders_; entry != nullptr;) {
    ResidentEntry* const next = entry->holder_next;
    const std::uint32_t locks = entry->locks.count(now);
    if (locks == 0) {  // released or expired since: only a new lock links it again
      RemoveHolderLocked(entry);
    } else {
      stats->locked_objects += 1;
      stats->locked_bytes += Aligned(entry->size);
      stats->read_locks += locks;
    }
    entry = next;
  }
  for (const auto& [key, copies] : staged_) {
    for (const StagedCopy& c : copies) {
      const std::uint64_t bytes = Aligned(c.size);
      stats->staging_objects += 1;
      stats->staging_bytes += bytes;
      if (now < c.expires_ms) {
        stats->locked_objects += 1;
        stats->locked_bytes += bytes;
      }
    }
  }
  for (const RetiredObject& r : retired_) {
    stats->retired_objects += 1;
    stats->retired_bytes += Aligned(r.size);
  }
  for (const AbandonedCopy& a : abandoned_) {
    stats->retired_objects += 1;
    stats->retired_bytes += Aligned(a.size);
  }
  for (const QuarantinedCopy& q : quarantined_) {
    stats->quarantined_objects += 1;
    stats->quarantined_bytes += Aligned(q.size);
  }
}

}  // namespace lmcache::store
