// ObjectTable: deletion, owner release, eviction, reclamation and statistics.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "common/logging.h"
#include "store/object_table.h"
#include "store/object_table_internal.h"

namespace lmcache::store {
namespace {

// Candidates fetched from the policy per round of EvictLru.
constexpr std::size_t kEvictionBatch = 64;

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
      ObjectShard& shard = lock.ShardOf(i);
      shard.AssertHeld();
      const DeleteStep step = shard.DeleteLocked(keys[i], force, now, freed.list());
      outcomes[i] = step.outcome;
      if (!step.removed_resident) continue;
      removed.push_back(keys[i]);
      removed_bytes.push_back(step.aligned_bytes);
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
      const ObjectShard& shard = *shards_[s];
      shard.AssertHeld();
      keys = shard.KeysLocked();
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
    ObjectShard& shard = *shards_[s];
    shard.AssertHeld();
    report.quarantine_released += shard.ReleaseQuarantinedLocked(owner, freed.list());
  }
  quarantined_objects_.fetch_sub(report.quarantine_released, std::memory_order_acq_rel);
  return report;
}

EvictionReport ObjectTable::EvictLru(std::uint64_t bytes) {
  return EvictFrom([this](std::size_t skip) { return policy_->Candidates(skip, kEvictionBatch); },
                   bytes);
}

EvictionReport ObjectTable::EvictTenant(std::string_view salt, std::uint64_t bytes) {
  const EvictionReport report = EvictFrom(
      [this, salt](std::size_t skip) {
        return policy_->TenantCandidates(salt, skip, kEvictionBatch);
      },
      bytes);
  ledger_.CountQuotaEviction(salt, report.objects, report.bytes);
  counters_.quota_evictions.fetch_add(report.objects, std::memory_order_relaxed);
  return report;
}

std::size_t ObjectTable::ReorderWindow(std::uint64_t bytes, std::uint64_t used_bytes,
                                       std::size_t resident) {
  if (used_bytes == 0 || resident == 0) return kMinReorderWindow;
  // Objects the bytes take at the average size, rounded up.
  const long double objects = static_cast<long double>(bytes) * static_cast<long double>(resident) /
                              static_cast<long double>(used_bytes);
  const long double window = 2 * std::ceil(objects) + kMinReorderWindow;
  return window >= kMaxReorderWindow ? kMaxReorderWindow : static_cast<std::size_t>(window);
}

EvictionReport ObjectTable::EvictReordered(std::uint64_t bytes, const CandidateOrder& order,
                                           std::vector<ObjectKey>* evicted,
                                           std::size_t max_window) {
  const std::size_t window =
      std::min(ReorderWindow(bytes, allocator_->UsedBytes(), policy_->size()), max_window);
  // A round hands EvictFrom the first half of its reordered window: what it
  // does not evict (locked ones aside, which skip counts) stays at the
  // front of the order, so the next round's window holds it again with the
  // next-oldest candidates. With nothing reordered that is plain LRU.
  return EvictFrom(
      [this, window, &order](std::size_t skip) {
        const std::vector<UsedCandidate> candidates = policy_->UsedCandidates(skip, window);
        if (candidates.empty()) return std::vector<ObjectKey>{};
        std::vector<ObjectKey> ordered = order(candidates, policy_->size());
        ordered.resize((ordered.size() + 1) / 2);
        return ordered;
      },
      bytes, evicted);
}

EvictionReport ObjectTable::EvictFrom(
    const std::function<std::vector<ObjectKey>(std::size_t skip)>& next_candidates,
    std::uint64_t bytes, std::vector<ObjectKey>* evicted_keys) {
  EvictionReport report;
  std::size_t skip = 0;  // candidates at the front of the order found locked
  while (report.bytes < bytes) {
    const std::vector<ObjectKey> candidates = next_candidates(skip);
    if (candidates.empty()) break;
    // A few shards locked at a time, however long the round: stores wait on
    // one batch at most (and TSan's deadlock detector tracks 64 locks).
    for (std::size_t first = 0; first < candidates.size() && report.bytes < bytes;
         first += kEvictionBatch) {
      const std::size_t count = std::min(kEvictionBatch, candidates.size() - first);
      EvictBatch(std::span(candidates).subspan(first, count), bytes, &report, &skip,
                 evicted_keys);
    }
  }
  return report;
}

void ObjectTable::EvictBatch(std::span<const ObjectKey> batch, std::uint64_t bytes,
                             EvictionReport* report, std::size_t* skip,
                             std::vector<ObjectKey>* evicted_keys) {
  std::vector<ObjectKey> evicted;
  std::vector<std::uint64_t> evicted_bytes;
  {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, batch);
    const TimeMs now = clock_->NowMs();
    std::vector<ObjectKey> removed;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const ObjectKey& key = batch[i];
      if (report->bytes >= bytes) break;
      ObjectShard& shard = lock.ShardOf(i);
      shard.AssertHeld();
      const EvictStep step = shard.EvictLocked(key, now, freed.list());
      if (step.state == EvictState::kLocked) {
        *skip += 1;
        continue;
      }
      removed.push_back(key);  // evicted, or the policy lagged behind a delete: forget it
      if (step.state == EvictState::kAbsent) continue;
      report->bytes += step.aligned_bytes;
      report->objects += 1;
      evicted.push_back(key);
      evicted_bytes.push_back(step.aligned_bytes);
    }
    if (!removed.empty()) policy_->OnRemoved(removed);
  }
  if (evicted_keys != nullptr) {
    evicted_keys->insert(evicted_keys->end(), evicted.begin(), evicted.end());
  }
  NotifyEvicted(evicted, evicted_bytes);
}

Status ObjectTable::SetQuota(std::string_view salt, std::uint64_t bytes) {
  LMC_RETURN_IF_ERROR(ledger_.SetLimit(salt, bytes));
  if (const std::uint64_t excess = ledger_.Excess(salt); excess > 0) EvictTenant(salt, excess);
  return Status::Ok();
}

EvictionReport ObjectTable::TrimOverQuota() {
  EvictionReport total;
  for (const auto& [salt, excess] : ledger_.OverLimit()) {
    const EvictionReport report = EvictTenant(salt, excess);
    total.objects += report.objects;
    total.bytes += report.bytes;
  }
  return total;
}

std::uint64_t ObjectTable::ReclaimExpired() {
  static RateLimitedLog expired_write_log(std::chrono::seconds(10));
  std::uint64_t reclaimed = 0;
  std::uint64_t expired_writes = 0;
  std::uint64_t quarantined = 0;
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, s);
    ObjectShard& shard = *shards_[s];
    shard.AssertHeld();
    const ReclaimStep step = shard.ReclaimLocked(clock_->NowMs(), freed.list());
    expired_writes += step.expired_writes;
    quarantined += step.quarantined;
    reclaimed += freed.size();
  }
  // The locks of expired leases expired with them: only the records remain.
  (void)leases_.TakeExpired(clock_->NowMs());
  if (expired_writes > 0) {
    counters_.expired_writes_reclaimed.fetch_add(expired_writes, std::memory_order_relaxed);
    quarantined_objects_.fetch_add(quarantined, std::memory_order_acq_rel);
    expired_write_log.Warn(
        "{} staged writes were not committed within their write lease; {} of "
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
  const std::uint32_t index = ShardIndex(key);
  ShardSetLock lock(*this, index);
  const ObjectShard& shard = *shards_[index];
  shard.AssertHeld();
  return shard.FindLocked(key, clock_->NowMs());
}

TableStats ObjectTable::Stats() const {
  TableStats stats;
  for (std::uint32_t s = 0; s < num_shards(); ++s) {
    ShardSetLock lock(*this, s);
    ObjectShard& shard = *shards_[s];  // Stats prunes its lock holders
    shard.AssertHeld();
    shard.AddStatsLocked(clock_->NowMs(), &stats);
  }
  const LeaseCounts leases = leases_.Counts();
  stats.read_leases = leases.read;
  stats.write_leases = leases.write;
  counters_.CopyTo(&stats);
  return stats;
}

}  // namespace lmcache::store
