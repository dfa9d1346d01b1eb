// ObjectTable: deletion, owner release, eviction, reclamation and statistics.
#include <spdlog/spdlog.h>

#include "common/logging.h"
#include "store/object_table.h"
#include "store/object_table_internal.h"

namespace lmcache::store {
namespace {

// Candidates fetched from the policy per round of EvictLru.
constexpr std::size_t kEvictionBatch = 64;

RetiredEntry RetireResident(const ObjectKey& key, const ResidentEntry& entry) {
  RetiredEntry retired;
  retired.key = key;
  retired.offset = entry.offset;
  retired.size = entry.size;
  retired.locks = entry.locks;
  return retired;
}

RetiredEntry RetireStaged(const ObjectKey& key, const StagedEntry& entry) {
  RetiredEntry retired;
  retired.key = key;
  retired.offset = entry.offset;
  retired.size = entry.size;
  retired.staged = true;
  retired.write_lease = entry.lease;
  retired.writer = entry.owner;
  retired.expires_ms = entry.expires_ms;
  return retired;
}

}  // namespace

std::vector<DeleteOutcome> ObjectTable::Delete(std::span<const ObjectKey> keys, bool force) {
  std::vector<DeleteOutcome> outcomes(keys.size(), DeleteOutcome::kNotFound);
  std::vector<ObjectKey> removed;
  std::vector<std::uint64_t> removed_bytes;
  {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      Shard& shard = ShardOf(keys[i]);
      shard.mu.AssertHeld();
      auto res = shard.resident.find(keys[i]);
      auto stg = shard.staging.find(keys[i]);
      if (stg != shard.staging.end()) {  // expired writer copies go in any case
        std::erase_if(stg->second, [&](const StagedEntry& e) {
          if (now < e.expires_ms) return false;
          freed.Add(e.offset);
          return true;
        });
        if (stg->second.empty()) {
          shard.staging.erase(stg);
          stg = shard.staging.end();
        }
      }
      const bool resident_locked =
          res != shard.resident.end() && res->second.locks.IsLocked(now);
      const bool staged_live = stg != shard.staging.end();
      if (res == shard.resident.end() && !staged_live) continue;
      if (!force && (resident_locked || staged_live)) {
        outcomes[i] = DeleteOutcome::kLocked;
        continue;
      }
      if (res != shard.resident.end()) {
        if (resident_locked) {
          shard.retired.push_back(RetireResident(keys[i], res->second));
        } else {
          freed.Add(res->second.offset);
        }
        removed.push_back(keys[i]);
        removed_bytes.push_back(allocator_->AlignedSize(res->second.size));
        EraseResident(shard, res);
      }
      if (staged_live) {
        for (const StagedEntry& e : stg->second) shard.retired.push_back(RetireStaged(keys[i], e));
        shard.staging.erase(stg);
      }
      outcomes[i] = DeleteOutcome::kDeleted;
    }
    if (!removed.empty()) policy_->OnRemoved(removed);
  }
  NotifyDeleted(removed, removed_bytes);
  return outcomes;
}

std::uint64_t ObjectTable::Clear(bool force) {
  std::uint64_t cleared = 0;
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    std::vector<ObjectKey> keys;
    {
      ShardSetLock lock(*this, s);
      const Shard& shard = shards_[s];
      shard.mu.AssertHeld();
      keys.reserve(shard.resident.size() + shard.staging.size());
      for (const auto& [key, entry] : shard.resident) keys.push_back(key);
      for (const auto& [key, entries] : shard.staging) {
        if (!shard.resident.contains(key)) keys.push_back(key);
      }
    }
    // Objects admitted between the two steps are simply not part of this clear.
    for (const DeleteOutcome outcome : Delete(keys, force)) {
      if (outcome == DeleteOutcome::kDeleted) cleared += 1;
    }
  }
  return cleared;
}

void ObjectTable::Touch(std::span<const ObjectKey> keys) {
  // The policy ignores keys it does not track, so no shard lock is needed.
  policy_->OnAccessed(keys);
}

OwnerReleaseReport ObjectTable::ReleaseOwner(const Owner& owner) {
  OwnerReleaseReport report;
  for (auto& [lease, record] : leases_.TakeOwner(owner)) {
    if (record.kind == LeaseKind::kRead) {
      report.read_locks_released += ReleaseRead(lease, record.keys, kMaxReadLockCount);
      continue;
    }
    report.writes_aborted += AbortStaged(lease, record.keys);
  }
  if (quarantined_objects_.load(std::memory_order_acquire) == 0) return report;
  // The writer is gone: its quarantined copies can no longer be written.
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, s);
    Shard& shard = shards_[s];
    shard.mu.AssertHeld();
    std::erase_if(shard.retired, [&](const RetiredEntry& r) {
      if (!r.quarantined || !(r.writer == owner)) return false;
      freed.Add(r.offset);
      report.quarantine_released += 1;
      return true;
    });
  }
  quarantined_objects_.fetch_sub(report.quarantine_released, std::memory_order_acq_rel);
  return report;
}

EvictionReport ObjectTable::EvictLru(std::uint64_t bytes) {
  EvictionReport report;
  std::size_t skip = 0;  // candidates at the front of the order found locked
  while (report.bytes < bytes) {
    const std::vector<ObjectKey> candidates = policy_->Candidates(skip, kEvictionBatch);
    if (candidates.empty()) break;
    std::vector<ObjectKey> evicted;
    std::vector<std::uint64_t> evicted_bytes;
    {
      DeferredFree freed(*this);
      ShardSetLock lock(*this, candidates);
      const TimeMs now = clock_->NowMs();
      std::vector<ObjectKey> removed;
      for (const ObjectKey& key : candidates) {
        if (report.bytes >= bytes) break;
        Shard& shard = ShardOf(key);
        shard.mu.AssertHeld();
        auto it = shard.resident.find(key);
        if (it == shard.resident.end()) {
          removed.push_back(key);  // the policy lagged behind a delete: forget it
          continue;
        }
        if (it->second.locks.IsLocked(now)) {
          skip += 1;
          continue;
        }
        const std::uint64_t aligned = allocator_->AlignedSize(it->second.size);
        report.bytes += aligned;
        report.objects += 1;
        freed.Add(it->second.offset);
        EraseResident(shard, it);
        removed.push_back(key);
        evicted.push_back(key);
        evicted_bytes.push_back(aligned);
      }
      if (!removed.empty()) policy_->OnRemoved(removed);
    }
    NotifyEvicted(evicted, evicted_bytes);
  }
  return report;
}

std::uint64_t ObjectTable::ReclaimExpired() {
  static RateLimitedLog expired_write_log(std::chrono::seconds(10));
  std::uint64_t reclaimed = 0;
  std::uint64_t expired_writes = 0;
  std::uint64_t quarantined = 0;
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, s);
    Shard& shard = shards_[s];
    shard.mu.AssertHeld();
    const TimeMs now = clock_->NowMs();
    std::vector<RetiredEntry> to_quarantine;
    for (auto it = shard.staging.begin(); it != shard.staging.end();) {
      std::erase_if(it->second, [&](const StagedEntry& e) {
        if (now < e.expires_ms) return false;
        expired_writes += 1;
        if (e.owner.kind == OwnerKind::kInstance) {
          // Its worker may still be copying into it (fail-stop: fence, then
          // release; here the fence is the worker's own end).
          RetiredEntry q;
          q.key = it->first;
          q.offset = e.offset;
          q.size = e.size;
          q.staged = true;
          q.quarantined = true;
          q.write_lease = e.lease;
          q.writer = e.owner;
          to_quarantine.push_back(std::move(q));
        } else {
          freed.Add(e.offset);
        }
        return true;
      });
      it = it->second.empty() ? shard.staging.erase(it) : std::next(it);
    }
    quarantined += to_quarantine.size();
    for (RetiredEntry& q : to_quarantine) shard.retired.push_back(std::move(q));
    std::erase_if(shard.retired, [&](const RetiredEntry& r) {
      if (!r.Ended(now)) return false;
      freed.Add(r.offset);
      return true;
    });
    reclaimed += freed.size();
  }
  // The locks of expired leases expired with them: only the records remain.
  (void)leases_.TakeExpired(clock_->NowMs());
  if (expired_writes > 0) {
    expired_writes_reclaimed_.fetch_add(expired_writes, std::memory_order_relaxed);
    quarantined_objects_.fetch_add(quarantined, std::memory_order_acq_rel);
    expired_write_log.Warn("{} staged writes were not committed within their write lease; {} of "
                           "them stay quarantined (not reused) until the worker that may still "
                           "write them unregisters, disconnects or is reaped",
                           expired_writes, quarantined);
  }
  return reclaimed;
}

Result<std::span<std::byte>> ObjectTable::LeasedBytes(Offset offset, std::uint64_t size) const {
  auto bytes = allocator_->Resolve(offset, size);
  if (!bytes.ok()) return bytes.status();
  return std::span<std::byte>(*bytes, size);
}

std::span<std::byte> ObjectTable::PoolBytes() const {
  const std::uint64_t size = allocator_->capacity_bytes();
  auto base = allocator_->Resolve(0, size);
  return base.ok() ? std::span<std::byte>(*base, size) : std::span<std::byte>();
}

std::optional<ObjectInfo> ObjectTable::Find(const ObjectKey& key) const {
  ShardSetLock lock(*this, ShardIndex(key));
  const Shard& shard = ShardOf(key);
  shard.mu.AssertHeld();
  const TimeMs now = clock_->NowMs();
  if (auto it = shard.resident.find(key); it != shard.resident.end()) {
    return ObjectInfo{ObjectState::kResident, it->second.offset, it->second.size,
                      it->second.locks.count(now), it->second.locks.holds(now)};
  }
  if (auto it = shard.staging.find(key); it != shard.staging.end() && !it->second.empty()) {
    const StagedEntry& e = it->second.front();
    return ObjectInfo{ObjectState::kStaging, e.offset, e.size, 0, 0};
  }
  return std::nullopt;
}

TableStats ObjectTable::Stats() const {
  TableStats stats;
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    ShardSetLock lock(*this, s);
    Shard& shard = shards_[s];  // Stats prunes its lock holders
    shard.mu.AssertHeld();
    const TimeMs now = clock_->NowMs();
    stats.resident_objects += shard.resident.size();
    stats.resident_bytes += shard.resident_bytes;
    for (ResidentEntry* entry = shard.holders; entry != nullptr;) {
      ResidentEntry* const next = entry->holder_next;
      const std::uint32_t locks = entry->locks.count(now);
      if (locks == 0) {  // released or expired since: only a new lock links it again
        shard.RemoveHolder(entry);
      } else {
        stats.locked_objects += 1;
        stats.locked_bytes += allocator_->AlignedSize(entry->size);
        stats.read_locks += locks;
      }
      entry = next;
    }
    for (const auto& [key, entries] : shard.staging) {
      for (const StagedEntry& e : entries) {
        const std::uint64_t bytes = allocator_->AlignedSize(e.size);
        stats.staging_objects += 1;
        stats.staging_bytes += bytes;
        if (now < e.expires_ms) {
          stats.locked_objects += 1;
          stats.locked_bytes += bytes;
        }
      }
    }
    for (const RetiredEntry& r : shard.retired) {
      std::uint64_t& objects = r.quarantined ? stats.quarantined_objects : stats.retired_objects;
      std::uint64_t& bytes = r.quarantined ? stats.quarantined_bytes : stats.retired_bytes;
      objects += 1;
      bytes += allocator_->AlignedSize(r.size);
    }
  }
  const LeaseCounts leases = leases_.Counts();
  stats.read_leases = leases.read;
  stats.write_leases = leases.write;
  stats.on_demand_evictions = on_demand_evictions_.load(std::memory_order_relaxed);
  stats.expired_writes_reclaimed = expired_writes_reclaimed_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace lmcache::store
