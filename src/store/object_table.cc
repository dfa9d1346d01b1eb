// ObjectTable: construction, the write path and the read path.
#include "store/object_table.h"

#include <spdlog/spdlog.h>

#include <unordered_set>

#include "store/object_table_internal.h"

namespace lmcache::store {
namespace {

StagedEntry* FindStaged(std::vector<StagedEntry>& entries, OwnerId owner) {
  for (StagedEntry& entry : entries) {
    if (entry.owner == owner) return &entry;
  }
  return nullptr;
}

void EraseStaged(
    std::unordered_map<ObjectKey, std::vector<StagedEntry>, ObjectKeyHash>& staging,
    std::unordered_map<ObjectKey, std::vector<StagedEntry>, ObjectKeyHash>::iterator it,
    OwnerId owner) {
  std::erase_if(it->second, [owner](const StagedEntry& e) { return e.owner == owner; });
  if (it->second.empty()) staging.erase(it);
}

}  // namespace

ObjectTable::ObjectTable(alloc::SlabAllocator* allocator, EvictionPolicy* policy,
                         const Clock* clock, const ObjectTableConfig& config)
    : allocator_(allocator),
      policy_(policy),
      clock_(clock),
      config_(config),
      shards_(new Shard[std::max<std::uint32_t>(config.num_shards, 1)]) {}

ObjectTable::~ObjectTable() = default;

std::uint32_t ObjectTable::ShardIndex(const ObjectKey& key) const {
  return static_cast<std::uint32_t>(ObjectKeyHash{}(key) %
                                    std::max<std::uint32_t>(config_.num_shards, 1));
}

ObjectTable::Shard& ObjectTable::ShardOf(const ObjectKey& key) const {
  return shards_[ShardIndex(key)];
}

void ObjectTable::FreeOffset(Offset offset) {
  Status status = allocator_->Free(offset);
  if (!status.ok()) spdlog::error("object table freed a non-live offset: {}", status.ToString());
}

Status ObjectTable::ValidateKeys(std::span<const ObjectKey> keys, bool require_distinct) const {
  for (const ObjectKey& key : keys) LMC_RETURN_IF_ERROR(ValidateObjectKey(key));
  if (require_distinct) {
    std::unordered_set<ObjectKey, ObjectKeyHash> seen;
    for (const ObjectKey& key : keys) {
      if (!seen.insert(key).second) {
        return Status(ErrorCode::kInvalidArgument,
                      "the batch names key " + key.DebugString() + " twice");
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<Offset>> ObjectTable::AllocateWithEviction(std::uint64_t size, std::size_t count,
                                                              AllocationMode mode) {
  auto batch = allocator_->AllocateBatch(size, count);
  if (batch.ok() || batch.status().code() != ErrorCode::kOutOfMemory) return batch;
  if (config_.on_demand_eviction && allocator_->AlignedSize(size) <= allocator_->capacity_bytes()) {
    const std::uint64_t wanted = allocator_->AlignedSize(size) * count;
    bool evicted_any = false;
    // Freed bytes of another size class help only once whole slabs empty, so
    // keep evicting until the batch fits or nothing evictable is left.
    while (EvictLru(wanted).objects > 0) {
      evicted_any = true;
      batch = allocator_->AllocateBatch(size, count);
      if (batch.ok()) break;
    }
    if (evicted_any) on_demand_evictions_.fetch_add(1, std::memory_order_relaxed);
    if (batch.ok()) return batch;
  }
  if (mode == AllocationMode::kAllOrNothing) return std::vector<Offset>{};
  std::vector<Offset> prefix;
  while (prefix.size() < count) {
    auto one = allocator_->Allocate(size);
    if (!one.ok()) break;
    prefix.push_back(*one);
  }
  return prefix;
}

Result<ReserveWriteResult> ObjectTable::ReserveWrite(std::span<const ObjectKey> keys,
                                                     std::uint64_t size, OwnerId owner,
                                                     AllocationMode mode) {
  if (size == 0) return InvalidArgument("reserve_write: object size must be > 0");
  LMC_RETURN_IF_ERROR(ValidateKeys(keys, /*require_distinct=*/true));
  ReserveWriteResult result;
  result.outcomes.assign(keys.size(), WriteReservation::kOutOfMemory);
  result.offsets.assign(keys.size(), 0);
  std::vector<std::size_t> needs_memory;
  std::vector<Offset> to_free;

  // Phase 1: classify under the shard locks. Allocation happens outside them,
  // because on-demand eviction must lock other shards.
  {
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      Shard& shard = ShardOf(keys[i]);
      if (shard.resident.contains(keys[i])) {
        result.outcomes[i] = WriteReservation::kAlreadyResident;
        continue;
      }
      auto staged_it = shard.staging.find(keys[i]);
      StagedEntry* mine =
          staged_it == shard.staging.end() ? nullptr : FindStaged(staged_it->second, owner);
      if (mine != nullptr && mine->size == size) {
        // A repeated reservation by the same writer gets its buffer back (the
        // reference leaks the first one until its TTL, spec 17.11).
        mine->expires_ms = now + config_.write_ttl_ms;
        result.outcomes[i] = WriteReservation::kReserved;
        result.offsets[i] = mine->offset;
        continue;
      }
      if (mine != nullptr) {
        to_free.push_back(mine->offset);  // same writer, new size: start over
        EraseStaged(shard.staging, staged_it, owner);
      }
      needs_memory.push_back(i);
    }
  }
  for (const Offset offset : to_free) FreeOffset(offset);

  // Phase 2: allocate.
  std::vector<Offset> offsets;
  if (!needs_memory.empty()) {
    LMC_ASSIGN_OR_RETURN(offsets, AllocateWithEviction(size, needs_memory.size(), mode));
  }

  // Phase 3: stage what got memory, re-checking what changed meanwhile.
  to_free.clear();
  {
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t j = 0; j < needs_memory.size() && j < offsets.size(); ++j) {
      const std::size_t i = needs_memory[j];
      Shard& shard = ShardOf(keys[i]);
      if (shard.resident.contains(keys[i])) {
        to_free.push_back(offsets[j]);
        result.outcomes[i] = WriteReservation::kAlreadyResident;
        continue;
      }
      std::vector<StagedEntry>& entries = shard.staging[keys[i]];
      if (StagedEntry* mine = FindStaged(entries, owner); mine != nullptr) {
        // The same owner raced itself with two reservations: keep the first.
        to_free.push_back(offsets[j]);
        mine->expires_ms = now + config_.write_ttl_ms;
        result.offsets[i] = mine->offset;
      } else {
        entries.push_back({owner, offsets[j], size, now + config_.write_ttl_ms});
        result.offsets[i] = offsets[j];
      }
      result.outcomes[i] = WriteReservation::kReserved;
    }
  }
  for (const Offset offset : to_free) FreeOffset(offset);

  for (const WriteReservation outcome : result.outcomes) {
    if (outcome == WriteReservation::kReserved) result.reserved += 1;
    if (outcome == WriteReservation::kOutOfMemory) result.out_of_memory += 1;
  }
  return result;
}

std::vector<WriteOutcome> ObjectTable::FinishWrite(std::span<const ObjectKey> keys, OwnerId owner) {
  std::vector<WriteOutcome> outcomes(keys.size(), WriteOutcome::kNotStaged);
  std::vector<ObjectKey> admitted;
  std::vector<Offset> to_free;
  {
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      Shard& shard = ShardOf(keys[i]);
      auto staged_it = shard.staging.find(keys[i]);
      StagedEntry* mine =
          staged_it == shard.staging.end() ? nullptr : FindStaged(staged_it->second, owner);
      if (mine == nullptr) {
        // A forced delete may have retired this writer's copy: free it now.
        auto retired =
            std::find_if(shard.retired.begin(), shard.retired.end(), [&](const RetiredEntry& r) {
              return r.staged && r.writer == owner && r.key == keys[i];
            });
        if (retired != shard.retired.end()) {
          to_free.push_back(retired->offset);
          shard.retired.erase(retired);
        }
        continue;
      }
      const StagedEntry entry = *mine;
      EraseStaged(shard.staging, staged_it, owner);
      if (now >= entry.expires_ms) {
        to_free.push_back(entry.offset);
        outcomes[i] = WriteOutcome::kLeaseExpired;
      } else if (shard.resident.contains(keys[i])) {
        to_free.push_back(entry.offset);
        outcomes[i] = WriteOutcome::kDuplicateDiscarded;
      } else {
        shard.resident.emplace(keys[i], ResidentEntry{entry.offset, entry.size, ReadLease{}});
        admitted.push_back(keys[i]);
        outcomes[i] = WriteOutcome::kAdmitted;
      }
    }
    // Inside the shard locks, so an eviction of these keys cannot slip between
    // admission and the policy learning of it.
    if (!admitted.empty()) policy_->OnAdmitted(admitted);
  }
  for (const Offset offset : to_free) FreeOffset(offset);
  return outcomes;
}

std::size_t ObjectTable::AbortWrite(std::span<const ObjectKey> keys, OwnerId owner) {
  std::size_t aborted = 0;
  std::vector<Offset> to_free;
  {
    ShardSetLock lock(*this, keys);
    for (const ObjectKey& key : keys) {
      Shard& shard = ShardOf(key);
      auto staged_it = shard.staging.find(key);
      if (staged_it == shard.staging.end()) continue;
      if (StagedEntry* mine = FindStaged(staged_it->second, owner); mine != nullptr) {
        to_free.push_back(mine->offset);
        EraseStaged(shard.staging, staged_it, owner);
        aborted += 1;
      }
    }
  }
  for (const Offset offset : to_free) FreeOffset(offset);
  return aborted;
}

bool ObjectTable::CollectResident(std::span<const ObjectKey> keys, ReadMode mode,
                                  std::vector<ResidentEntry*>* entries) const {
  entries->assign(keys.size(), nullptr);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    Shard& shard = ShardOf(keys[i]);
    auto it = shard.resident.find(keys[i]);
    if (it != shard.resident.end()) {
      (*entries)[i] = &it->second;
    } else if (mode == ReadMode::kAllOrNothing) {
      entries->clear();
      return false;
    } else if (mode == ReadMode::kPrefix) {
      break;
    }
  }
  return true;
}

Result<std::vector<ReadGrant>> ObjectTable::ReserveRead(std::span<const ObjectKey> keys,
                                                        std::uint32_t count, OwnerId owner,
                                                        ReadMode mode) {
  if (count < 1 || count > kMaxReadLockCount) {
    return InvalidArgument("read lock count must be in [1, 128], got " + std::to_string(count));
  }
  LMC_RETURN_IF_ERROR(ValidateKeys(keys, /*require_distinct=*/false));
  std::vector<ReadGrant> grants(keys.size());
  std::vector<ObjectKey> granted_keys;
  ShardSetLock lock(*this, keys);
  const TimeMs now = clock_->NowMs();
  std::vector<ResidentEntry*> entries;
  if (!CollectResident(keys, mode, &entries)) return grants;  // nothing locked
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (entries[i] == nullptr) continue;
    entries[i]->lease.Lock(owner, count, now, config_.read_ttl_ms);
    grants[i] = {true, entries[i]->offset, entries[i]->size};
    granted_keys.push_back(keys[i]);
  }
  if (!granted_keys.empty()) policy_->OnAccessed(granted_keys);
  return grants;
}

Result<std::vector<ReadGrant>> ObjectTable::AcquireForRead(std::span<const ObjectKey> keys,
                                                           OwnerId owner) {
  LMC_RETURN_IF_ERROR(ValidateKeys(keys, /*require_distinct=*/false));
  std::vector<ReadGrant> grants(keys.size());
  ShardSetLock lock(*this, keys);
  const TimeMs now = clock_->NowMs();
  std::vector<ResidentEntry*> entries;
  if (!CollectResident(keys, ReadMode::kAllOrNothing, &entries)) return grants;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!entries[i]->lease.IsLocked(now))
      entries[i]->lease.Lock(owner, 1, now, config_.read_ttl_ms);
    grants[i] = {true, entries[i]->offset, entries[i]->size};
  }
  return grants;
}

Result<std::vector<ReleaseOutcome>> ObjectTable::FinishRead(std::span<const ObjectKey> keys,
                                                            std::uint32_t count, OwnerId owner) {
  if (count < 1 || count > kMaxReadLockCount) {
    return InvalidArgument("read lock count must be in [1, 128], got " + std::to_string(count));
  }
  std::vector<ReleaseOutcome> outcomes(keys.size(), ReleaseOutcome::kNotFound);
  std::vector<Offset> to_free;
  {
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      Shard& shard = ShardOf(keys[i]);
      auto it = shard.resident.find(keys[i]);
      if (it != shard.resident.end()) {
        outcomes[i] = it->second.lease.Unlock(owner, count, now) > 0 ? ReleaseOutcome::kReleased
                                                                     : ReleaseOutcome::kNotLocked;
        continue;
      }
      // A reader of a force-deleted object releases the retired copy.
      for (auto r = shard.retired.begin(); r != shard.retired.end(); ++r) {
        if (r->staged || !(r->key == keys[i]) || !r->lease.IsLocked(now)) continue;
        r->lease.Unlock(owner, count, now);
        outcomes[i] = ReleaseOutcome::kReleased;
        if (r->Ended(now)) {
          to_free.push_back(r->offset);
          shard.retired.erase(r);
        }
        break;
      }
    }
  }
  for (const Offset offset : to_free) FreeOffset(offset);
  return outcomes;
}

}  // namespace lmcache::store
