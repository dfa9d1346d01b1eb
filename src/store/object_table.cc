// ObjectTable: construction, the write path and the read path.
#include "store/object_table.h"

#include <spdlog/spdlog.h>

#include <unordered_set>

#include "common/check.h"
#include "store/object_table_internal.h"

namespace lmcache::store {
namespace {

template <typename Match>
StagedEntry* FindStaged(std::vector<StagedEntry>& entries, Match match) {
  for (StagedEntry& entry : entries) {
    if (match(entry)) return &entry;
  }
  return nullptr;
}

// Erases the entries of `it` that match; erases the key when none is left.
template <typename Match>
void EraseStaged(StagingMap& staging, StagingMap::iterator it, Match match) {
  std::erase_if(it->second, match);
  if (it->second.empty()) staging.erase(it);
}

Status CheckLockCount(std::uint32_t count) {
  if (count >= 1 && count <= kMaxReadLockCount) return Status::Ok();
  return InvalidArgument("read lock count must be in [1, 128], got " + std::to_string(count));
}

}  // namespace

DeferredFree::~DeferredFree() {
  for (const Offset offset : offsets_) {
    // Out of the journal before the allocator can lend the slot again.
    if (table_.journal() != nullptr) table_.journal()->Freed(offset);
    const Status status = table_.allocator().Free(offset);
    if (!status.ok()) spdlog::error("object table freed a non-live offset: {}", status.ToString());
  }
}

ObjectTable::ObjectTable(alloc::SlabAllocator* allocator, EvictionPolicy* policy,
                         const Clock* clock, const ObjectTableConfig& config)
    : allocator_(allocator),
      policy_(policy),
      clock_(clock),
      config_(config),
      shards_(new Shard[std::max<std::uint32_t>(config.num_shards, 1)]) {}

ObjectTable::~ObjectTable() = default;

namespace {
// About 31,000 years: "never" that still adds to a clock reading without overflow.
constexpr TimeMs kPinnedTtlMs = TimeMs{1} << 50;
}  // namespace

TimeMs ObjectTable::WriteTtl(const Owner& owner) const {
  // The server's own writers (device copies, L2 loads) always end their
  // leases when their copy returns, however late: their buffers never expire
  // under them.
  const bool server_copies = owner.kind == OwnerKind::kDevice || owner.kind == OwnerKind::kInternal;
  return server_copies ? kPinnedTtlMs : config_.write_ttl_ms;
}

TimeMs ObjectTable::ReadTtl(const Owner& owner) const {
  return owner.kind == OwnerKind::kDevice ? kPinnedTtlMs : config_.read_ttl_ms;
}

std::uint32_t ObjectTable::num_shards() const {
  return std::max<std::uint32_t>(config_.num_shards, 1);
}

std::uint32_t ObjectTable::ShardIndex(const ObjectKey& key) const {
  return static_cast<std::uint32_t>(ObjectKeyHash{}(key) % num_shards());
}

ObjectTable::Shard& ObjectTable::ShardOf(const ObjectKey& key) const {
  return shards_[ShardIndex(key)];
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
                                                              AllocationMode mode,
                                                              WhilePoolWarms warming,
                                                              bool* pages_pending) {
  auto batch = allocator_->AllocateBatch(size, count);
  const bool short_of_pages = !batch.ok() && batch.status().code() == ErrorCode::kOutOfMemory;
  if (short_of_pages && warming == WhilePoolWarms::kReportBusy && allocator_->growing()) {
    *pages_pending = true;
    return std::vector<Offset>{};
  }
  // A pool still being pre-faulted gets fresh pages soon: wait for them
  // rather than evict what is cached or refuse the store.
  const auto deadline = std::chrono::steady_clock::now() + config_.prefault_wait;
  while (warming == WhilePoolWarms::kWait && !batch.ok() &&
         batch.status().code() == ErrorCode::kOutOfMemory) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !allocator_->WaitReadyBeyond(allocator_->ready_bytes(), left)) break;
    batch = allocator_->AllocateBatch(size, count);
  }
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

void ObjectTable::NotifyWhenPagesReady(std::uint64_t seen, std::function<void()> wake) {
  allocator_->NotifyWhenReadyBeyond(seen, std::move(wake));
}

Result<WriteLease> ObjectTable::ReserveWrite(std::span<const ObjectKey> keys, std::uint64_t size,
                                             Owner owner, AllocationMode mode,
                                             WhilePoolWarms warming) {
  if (size == 0) return InvalidArgument("reserve_write: object size must be > 0");
  LMC_RETURN_IF_ERROR(ValidateKeys(keys, /*require_distinct=*/true));
  WriteLease result;
  result.outcomes.assign(keys.size(), WriteReservation::kOutOfMemory);
  result.offsets.assign(keys.size(), 0);
  const LeaseId lease = leases_.NewId();
  auto owned_by = [&owner](const StagedEntry& e) { return e.owner == owner; };
  std::vector<std::size_t> needs_memory;

  // Phase 1: classify under the shard locks. Allocation happens outside them,
  // because on-demand eviction must lock other shards.
  {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      Shard& shard = ShardOf(keys[i]);
      shard.mu.AssertHeld();
      if (shard.resident.contains(keys[i])) {
        result.outcomes[i] = WriteReservation::kAlreadyResident;
        continue;
      }
      auto staged_it = shard.staging.find(keys[i]);
      StagedEntry* mine =
          staged_it == shard.staging.end() ? nullptr : FindStaged(staged_it->second, owned_by);
      if (mine != nullptr && mine->size == size) {
        // A repeated reservation by the same writer gets its buffer back (the
        // reference leaks the first one until its TTL, spec 17.11); the copy
        // moves to the new lease.
        mine->lease = lease;
        mine->expires_ms = now + WriteTtl(owner);
        result.outcomes[i] = WriteReservation::kReserved;
        result.offsets[i] = mine->offset;
        continue;
      }
      if (mine != nullptr) {
        freed.Add(mine->offset);  // same writer, new size: start over
        EraseStaged(shard.staging, staged_it, owned_by);
      }
      needs_memory.push_back(i);
    }
  }

  // Phase 2: allocate.
  std::vector<Offset> offsets;
  bool pages_pending = false;
  // Read before allocating: pages made ready after it wake the caller at once.
  const std::uint64_t ready_bytes_seen = allocator_->ready_bytes();
  if (!needs_memory.empty()) {
    LMC_ASSIGN_OR_RETURN(
        offsets, AllocateWithEviction(size, needs_memory.size(), mode, warming, &pages_pending));
    // Recorded as lent before the writer learns of them.
    if (journal_ != nullptr && !offsets.empty()) journal_->Staged(offsets, size);
  }

  // Phase 3: stage what got memory, re-checking what changed meanwhile.
  {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t j = 0; j < needs_memory.size() && j < offsets.size(); ++j) {
      const std::size_t i = needs_memory[j];
      Shard& shard = ShardOf(keys[i]);
      shard.mu.AssertHeld();
      if (shard.resident.contains(keys[i])) {
        freed.Add(offsets[j]);
        result.outcomes[i] = WriteReservation::kAlreadyResident;
        continue;
      }
      std::vector<StagedEntry>& entries = shard.staging[keys[i]];
      if (StagedEntry* mine = FindStaged(entries, owned_by); mine != nullptr) {
        // The same owner raced itself with two reservations: keep the first copy.
        freed.Add(offsets[j]);
        mine->lease = lease;
        mine->expires_ms = now + WriteTtl(owner);
        result.offsets[i] = mine->offset;
      } else {
        entries.push_back({lease, owner, offsets[j], size, now + WriteTtl(owner)});
        result.offsets[i] = offsets[j];
      }
      result.outcomes[i] = WriteReservation::kReserved;
    }
  }

  LeaseRecord record{owner, LeaseKind::kWrite, {}, clock_->NowMs() + WriteTtl(owner)};
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (result.outcomes[i] == WriteReservation::kReserved) record.keys.push_back(keys[i]);
    if (result.outcomes[i] == WriteReservation::kOutOfMemory) result.out_of_memory += 1;
  }
  result.reserved = record.keys.size();
  if (result.reserved > 0) {
    result.lease = lease;
    leases_.Add(lease, std::move(record));
  }
  if (pages_pending) {
    // All or nothing: what phase 1 handed back (this writer's own earlier
    // copies, now under `lease`) is given up too, so that a caller that
    // never comes back leaves nothing staged.
    AbortWrite(result.lease);
    WriteLease pending;
    pending.outcomes.assign(keys.size(), WriteReservation::kOutOfMemory);
    pending.offsets.assign(keys.size(), 0);
    pending.pages_pending = true;
    pending.ready_bytes_seen = ready_bytes_seen;
    return pending;
  }
  return result;
}

WriteCompletion ObjectTable::FinishWrite(LeaseId write_lease) {
  WriteCompletion completion;
  std::optional<LeaseRecord> record = leases_.Take(write_lease, LeaseKind::kWrite);
  if (!record) return completion;
  completion.keys = std::move(record->keys);
  completion.outcomes.assign(completion.keys.size(), WriteOutcome::kNotStaged);
  auto of_lease = [write_lease](const StagedEntry& e) { return e.lease == write_lease; };
  std::vector<ObjectKey> admitted;
  std::vector<std::uint64_t> admitted_bytes;
  {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, completion.keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t i = 0; i < completion.keys.size(); ++i) {
      const ObjectKey& key = completion.keys[i];
      Shard& shard = ShardOf(key);
      shard.mu.AssertHeld();
      auto staged_it = shard.staging.find(key);
      StagedEntry* mine =
          staged_it == shard.staging.end() ? nullptr : FindStaged(staged_it->second, of_lease);
      if (mine == nullptr) {
        // A forced delete may have retired this lease's copy: free it now.
        auto retired =
            std::find_if(shard.retired.begin(), shard.retired.end(), [&](const RetiredEntry& r) {
              return r.staged && r.write_lease == write_lease && r.key == key;
            });
        if (retired != shard.retired.end()) {
          freed.Add(retired->offset);
          shard.retired.erase(retired);
        }
        continue;
      }
      const StagedEntry entry = *mine;
      EraseStaged(shard.staging, staged_it, of_lease);
      if (now >= entry.expires_ms) {
        freed.Add(entry.offset);
        completion.outcomes[i] = WriteOutcome::kLeaseExpired;
      } else if (shard.resident.contains(key)) {
        freed.Add(entry.offset);
        completion.outcomes[i] = WriteOutcome::kDuplicateDiscarded;
      } else {
        AdmitResident(shard, key, entry.offset, entry.size);
        admitted.push_back(key);
        admitted_bytes.push_back(allocator_->AlignedSize(entry.size));
        completion.outcomes[i] = WriteOutcome::kAdmitted;
      }
    }
    // Inside the shard locks, so an eviction of these keys cannot slip between
    // admission and the policy learning of it.
    if (!admitted.empty()) policy_->OnAdmitted(admitted);
  }
  NotifyAdmitted(admitted, admitted_bytes, AdmissionSource::kWriter);
  completion.admitted = admitted.size();
  for (const WriteOutcome outcome : completion.outcomes) {
    if (outcome == WriteOutcome::kNotStaged || outcome == WriteOutcome::kLeaseExpired) {
      completion.lost += 1;
    }
  }
  return completion;
}

Result<ReadAcquisition> ObjectTable::FinishWriteAndRead(LeaseId write_lease, Owner reader,
                                                        std::uint32_t count) {
  const std::optional<LeaseRecord> record = leases_.Get(write_lease);
  if (!record || record->kind != LeaseKind::kWrite) return ReadAcquisition{};
  return FinishWriteAndRead(write_lease, reader, count, record->keys);
}

Result<ReadAcquisition> ObjectTable::FinishWriteAndRead(LeaseId write_lease, Owner reader,
                                                        std::uint32_t count,
                                                        std::span<const ObjectKey> keys) {
  LMC_RETURN_IF_ERROR(CheckLockCount(count));
  LMC_RETURN_IF_ERROR(ValidateKeys(keys, /*require_distinct=*/true));
  ReadAcquisition out;
  out.grants.assign(keys.size(), ReadGrant{});
  if (write_lease != kNoLease) {
    std::optional<LeaseRecord> record = leases_.Take(write_lease, LeaseKind::kWrite);
    if (record) {
      // The lease's copies the caller did not ask for go (the load ended before them).
      const std::unordered_set<ObjectKey, ObjectKeyHash> wanted(keys.begin(), keys.end());
      std::erase_if(record->keys, [&](const ObjectKey& k) { return wanted.contains(k); });
      if (!record->keys.empty()) AbortStaged(write_lease, record->keys);
    }
  }
  auto of_lease = [write_lease](const StagedEntry& e) { return e.lease == write_lease; };
  const LeaseId lease = leases_.NewId();
  std::vector<ObjectKey> admitted;
  std::vector<std::uint64_t> admitted_bytes;
  std::vector<ObjectKey> locked;
  {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      Shard& shard = ShardOf(keys[i]);
      shard.mu.AssertHeld();
      auto resident = shard.resident.find(keys[i]);
      auto staged_it = shard.staging.find(keys[i]);
      StagedEntry* mine = write_lease == kNoLease || staged_it == shard.staging.end()
                              ? nullptr
                              : FindStaged(staged_it->second, of_lease);
      if (mine != nullptr) {
        const StagedEntry entry = *mine;
        EraseStaged(shard.staging, staged_it, of_lease);
        if (now >= entry.expires_ms || resident != shard.resident.end()) {
          freed.Add(entry.offset);  // expired, or another writer admitted it first
        } else {
          resident = AdmitResident(shard, keys[i], entry.offset, entry.size);
          admitted.push_back(keys[i]);
          admitted_bytes.push_back(allocator_->AlignedSize(entry.size));
        }
      }
      if (resident == shard.resident.end()) continue;
      resident->second.locks.Lock(lease, reader, count, now, ReadTtl(reader));
      shard.AddHolder(&resident->second);
      out.grants[i] = {true, resident->second.offset, resident->second.size};
      locked.push_back(keys[i]);
    }
    if (!admitted.empty()) policy_->OnAdmitted(admitted);
  }
  NotifyAdmitted(admitted, admitted_bytes, AdmissionSource::kTier);
  out.granted = locked.size();
  if (!locked.empty()) {
    out.lease = lease;
    leases_.Add(lease,
                {reader, LeaseKind::kRead, std::move(locked), clock_->NowMs() + ReadTtl(reader)});
  }
  return out;
}

std::size_t ObjectTable::AbortWrite(LeaseId write_lease) {
  std::optional<LeaseRecord> record = leases_.Take(write_lease, LeaseKind::kWrite);
  return record ? AbortStaged(write_lease, record->keys) : 0;
}

std::size_t ObjectTable::AbortStaged(LeaseId write_lease, std::span<const ObjectKey> keys) {
  auto of_lease = [write_lease](const StagedEntry& e) { return e.lease == write_lease; };
  DeferredFree freed(*this);
  ShardSetLock lock(*this, keys);
  for (const ObjectKey& key : keys) {
    Shard& shard = ShardOf(key);
    shard.mu.AssertHeld();
    if (auto staged_it = shard.staging.find(key); staged_it != shard.staging.end()) {
      if (StagedEntry* mine = FindStaged(staged_it->second, of_lease); mine != nullptr) {
        freed.Add(mine->offset);
        EraseStaged(shard.staging, staged_it, of_lease);
        continue;
      }
    }
    std::erase_if(shard.retired, [&](const RetiredEntry& r) {
      if (!r.staged || r.write_lease != write_lease || !(r.key == key)) return false;
      freed.Add(r.offset);
      return true;
    });
  }
  return freed.size();
}

void ObjectTable::LockGranted(const ReadRequest& request, LeaseId lease,
                              const std::vector<ResidentEntry*>& entries, std::size_t granted,
                              TimeMs now, ReadAcquisition* out) const {
  for (std::size_t i = 0; i < granted; ++i) {
    ReadLocks& locks = entries[i]->locks;
    std::uint32_t fresh = request.count;
    for (const LeaseId from : request.consume) {
      if (locks.Transfer(from, lease, request.owner, now, ReadTtl(request.owner))) {
        out->consumed += 1;
        fresh -= 1;
        break;
      }
    }
    if (fresh > 0) locks.Lock(lease, request.owner, fresh, now, ReadTtl(request.owner));
    Shard& shard = ShardOf(request.keys[i]);
    shard.mu.AssertHeld();
    shard.AddHolder(entries[i]);
    out->grants[i] = {true, entries[i]->offset, entries[i]->size};
  }
}

Result<ReadAcquisition> ObjectTable::AcquireRead(const ReadRequest& request) {
  LMC_RETURN_IF_ERROR(CheckLockCount(request.count));
  const std::span<const ObjectKey> keys = request.keys;
  if (request.group == 0 || keys.size() % request.group != 0) {
    return InvalidArgument("read request of " + std::to_string(keys.size()) +
                           " keys is not made of whole groups of " + std::to_string(request.group));
  }
  LMC_RETURN_IF_ERROR(ValidateKeys(keys, /*require_distinct=*/false));
  ReadAcquisition out;
  out.grants.assign(keys.size(), ReadGrant{});
  const LeaseId lease = request.extend != kNoLease ? request.extend : leases_.NewId();
  {
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    std::vector<ResidentEntry*> entries(keys.size(), nullptr);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      Shard& shard = ShardOf(keys[i]);
      shard.mu.AssertHeld();
      auto it = shard.resident.find(keys[i]);
      if (it != shard.resident.end()) entries[i] = &it->second;
    }
    if (request.mode == ReadMode::kAllOrNothing) {
      out.missing = static_cast<std::size_t>(std::count(entries.begin(), entries.end(), nullptr));
      if (out.missing > 0) {
        // Nothing is locked. A failed retrieve still gives its share of the
        // lookup's locks back on what it found (spec 11.5).
        for (ResidentEntry* entry : entries) {
          if (entry == nullptr || !request.release_share_on_miss) continue;
          for (const LeaseId from : request.consume) {
            if (entry->locks.Unlock(from, 1, now) > 0) break;
          }
        }
        return out;
      }
      out.granted = keys.size();
    } else {
      // Whole groups only, up to the first incomplete one: no lock-then-undo.
      while (out.granted < keys.size() &&
             std::all_of(entries.begin() + static_cast<std::ptrdiff_t>(out.granted),
                         entries.begin() + static_cast<std::ptrdiff_t>(out.granted + request.group),
                         [](const ResidentEntry* e) { return e != nullptr; })) {
        out.granted += request.group;
      }
    }
    LockGranted(request, lease, entries, out.granted, now, &out);
    if (out.granted > 0) policy_->OnAccessed(keys.first(out.granted));
  }
  if (out.granted > 0) {
    out.lease = lease;
    LeaseRecord record{request.owner,
                       LeaseKind::kRead,
                       {keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(out.granted)},
                       clock_->NowMs() + ReadTtl(request.owner)};
    if (request.extend != kNoLease) {
      leases_.Append(lease, std::move(record));
    } else {
      leases_.Add(lease, std::move(record));
    }
  }
  return out;
}

void ObjectTable::NotifyAdmitted(const std::vector<ObjectKey>& keys,
                                 const std::vector<std::uint64_t>& bytes,
                                 AdmissionSource source) const {
  if (keys.empty()) return;
  for (StoreListener* listener : listeners_) listener->OnAdmitted(keys, bytes, source);
}

void ObjectTable::NotifyEvicted(const std::vector<ObjectKey>& keys,
                                const std::vector<std::uint64_t>& bytes) const {
  if (keys.empty()) return;
  for (StoreListener* listener : listeners_) listener->OnEvicted(keys, bytes);
}

void ObjectTable::NotifyDeleted(const std::vector<ObjectKey>& keys,
                                const std::vector<std::uint64_t>& bytes) const {
  if (keys.empty()) return;
  for (StoreListener* listener : listeners_) listener->OnDeleted(keys, bytes);
}

std::uint64_t ObjectTable::ReleaseLocked(LeaseId lease, std::span<const ObjectKey> keys,
                                         std::uint32_t count, TimeMs now,
                                         std::vector<Offset>* to_free) {
  std::uint64_t released = 0;
  for (const ObjectKey& key : keys) {
    Shard& shard = ShardOf(key);
    shard.mu.AssertHeld();
    if (auto it = shard.resident.find(key); it != shard.resident.end()) {
      released += it->second.locks.Unlock(lease, count, now);
      // Still linked among the lock holders: Stats unlinks it (unlinking
      // here would touch its neighbours, two cache misses per key released).
      continue;
    }
    // A reader of a force-deleted object releases the retired copy.
    for (auto r = shard.retired.begin(); r != shard.retired.end(); ++r) {
      if (r->staged || !(r->key == key) || r->locks.LeaseCount(lease, now) == 0) continue;
      released += r->locks.Unlock(lease, count, now);
      if (r->Ended(now)) {
        to_free->push_back(r->offset);
        shard.retired.erase(r);
      }
      break;
    }
  }
  return released;
}

std::uint64_t ObjectTable::ReleaseRead(LeaseId read_lease, std::span<const ObjectKey> keys,
                                       std::uint32_t count) {
  if (read_lease == kNoLease || keys.empty()) return 0;
  DeferredFree freed(*this);
  ShardSetLock lock(*this, keys);
  return ReleaseLocked(read_lease, keys, count, clock_->NowMs(), freed.list());
}

std::uint64_t ObjectTable::ReleaseRead(LeaseId read_lease) {
  std::optional<LeaseRecord> record = leases_.Take(read_lease, LeaseKind::kRead);
  if (!record) return 0;
  return ReleaseRead(read_lease, record->keys, kMaxReadLockCount);
}

}  // namespace lmcache::store
