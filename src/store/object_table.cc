// ObjectTable: construction, the write path and the read path.
#include "store/object_table.h"

#include <spdlog/spdlog.h>

#include <unordered_set>

#include "common/check.h"
#include "store/object_table_internal.h"

namespace lmcache::store {
namespace {

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
      ledger_(config.quota_mode),
      shard_context_{allocator, nullptr, &counters_.served_once_dropped,
                     config.quota_mode == QuotaMode::kOff ? nullptr : &ledger_, &pinned_bytes_,
                     static_cast<std::uint64_t>(config.max_pinned_fraction *
                                                static_cast<double>(allocator->capacity_bytes()))} {
  shards_.reserve(num_shards());
  for (std::uint32_t i = 0; i < num_shards(); ++i) {
    shards_.push_back(std::make_unique<ObjectShard>(&shard_context_));
  }
}

ObjectTable::~ObjectTable() = default;

namespace {
// About 31,000 years: "never" that still adds to a clock reading without overflow.
constexpr TimeMs kNeverExpiresMs = TimeMs{1} << 50;
}  // namespace

TimeMs ObjectTable::WriteTtl(const Owner& owner) const {
  // The server's own writers (device copies, L2 loads) always end their
  // leases when their copy returns, however late: their buffers never expire
  // under them.
  const bool server_copies = owner.kind == OwnerKind::kDevice || owner.kind == OwnerKind::kInternal;
  return server_copies ? kNeverExpiresMs : config_.write_ttl_ms;
}

TimeMs ObjectTable::ReadTtl(const Owner& owner) const {
  return owner.kind == OwnerKind::kDevice ? kNeverExpiresMs : config_.read_ttl_ms;
}

std::uint32_t ObjectTable::num_shards() const {
  return std::max<std::uint32_t>(config_.num_shards, 1);
}

std::uint32_t ObjectTable::ShardIndex(const ObjectKey& key) const {
  // From the hash's high half: a shard's Swiss tables (object_shard.h) take
  // each entry's tag from the low 7 bits, which the keys of one shard would
  // otherwise share all but one of (64 shards: 6 bits), and a probe would
  // then compare every second key it passes.
  return static_cast<std::uint32_t>((ObjectKeyHash{}(key) >> 32) % num_shards());
}

Status ObjectTable::ValidateKeys(std::span<const ObjectKey> keys, bool require_distinct) const {
  LMC_RETURN_IF_ERROR(ValidateObjectKeys(keys));
  if (require_distinct) {
    // The batch's own keys, by address: no key is copied (a batch at chunk
    // size 1 holds one key per token).
    struct Hash {
      std::size_t operator()(const ObjectKey* key) const { return ObjectKeyHash{}(*key); }
    };
    struct Equal {
      bool operator()(const ObjectKey* a, const ObjectKey* b) const { return *a == *b; }
    };
    std::unordered_set<const ObjectKey*, Hash, Equal> seen;
    seen.reserve(keys.size());
    for (const ObjectKey& key : keys) {
      if (!seen.insert(&key).second) {
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
    if (evicted_any) counters_.on_demand_evictions.fetch_add(1, std::memory_order_relaxed);
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

std::vector<std::size_t> ObjectTable::ReservePass(
    std::span<const ObjectKey> keys, std::uint64_t size, const Owner& owner, LeaseId lease,
    std::span<const std::size_t> pending, std::span<const Offset> offered, WriteLease* result) {
  std::vector<std::size_t> needs_memory;
  DeferredFree freed(*this);
  ShardSetLock lock(*this, keys);
  const TimeMs expires_ms = clock_->NowMs() + WriteTtl(owner);
  for (std::size_t j = 0; j < pending.size(); ++j) {
    const std::size_t i = pending[j];
    ObjectShard& shard = lock.ShardOf(i);
    shard.AssertHeld();
    const std::optional<Offset> slot =
        j < offered.size() ? std::optional(offered[j]) : std::nullopt;
    const ReserveStep step =
        shard.ReserveLocked(keys[i], owner, size, lease, expires_ms, slot, freed.list());
    switch (step.state) {
      case ReserveState::kResident: result->outcomes[i] = WriteReservation::kAlreadyResident; break;
      case ReserveState::kReserved:
        result->outcomes[i] = WriteReservation::kReserved;
        result->offsets[i] = step.offset;
        break;
      case ReserveState::kNeedsMemory: needs_memory.push_back(i); break;
      case ReserveState::kOverQuota:
        result->over_quota += 1;
        counters_.over_quota_objects.fetch_add(1, std::memory_order_relaxed);
        break;
    }
  }
  return needs_memory;
}

Result<WriteLease> ObjectTable::ReserveWrite(std::span<const ObjectKey> keys, std::uint64_t size,
                                             Owner owner, AllocationMode mode,
                                             WhilePoolWarms warming) {
  return ReserveWriteOf(keys, nullptr, size, std::move(owner), mode, warming);
}

Result<WriteLease> ObjectTable::ReserveWrite(std::vector<ObjectKey>&& keys, std::uint64_t size,
                                             Owner owner, AllocationMode mode,
                                             WhilePoolWarms warming) {
  return ReserveWriteOf(keys, &keys, size, std::move(owner), mode, warming);
}

Result<WriteLease> ObjectTable::ReserveWriteOf(std::span<const ObjectKey> keys,
                                               std::vector<ObjectKey>* movable, std::uint64_t size,
                                               Owner owner, AllocationMode mode,
                                               WhilePoolWarms warming) {
  if (size == 0) return InvalidArgument("reserve_write: object size must be > 0");
  LMC_RETURN_IF_ERROR(ValidateKeys(keys, /*require_distinct=*/true));
  WriteLease result;
  result.outcomes.assign(keys.size(), WriteReservation::kOutOfMemory);
  result.offsets.assign(keys.size(), 0);
  const LeaseId lease = leases_.NewId();
  std::vector<std::size_t> all(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) all[i] = i;
  // Classify under the shard locks, allocate outside them (on-demand eviction
  // locks other shards), then stage what got memory, re-checking each key.
  std::vector<std::size_t> needs_memory = ReservePass(keys, size, owner, lease, all, {}, &result);
  std::vector<Offset> offsets;
  bool pages_pending = false;
  // Read before allocating: pages made ready after it wake the caller at once.
  const std::uint64_t ready_bytes_seen = allocator_->ready_bytes();
  // Memory only for what the tenants' quotas admit: a refused key must not
  // cost anyone an eviction.
  if (ledger_.enabled() && !needs_memory.empty()) {
    needs_memory = FitToQuotas(keys, size, std::move(needs_memory), mode, &result);
  }
  if (!needs_memory.empty()) {
    LMC_ASSIGN_OR_RETURN(
        offsets, AllocateWithEviction(size, needs_memory.size(), mode, warming, &pages_pending));
    // Recorded as lent before the writer learns of them.
    if (journal_ != nullptr && !offsets.empty()) journal_->Lent(offsets, size);
    if (!offsets.empty()) {
      ReservePass(keys, size, owner, lease, std::span(needs_memory).first(offsets.size()), offsets,
                  &result);
    }
  }

  if (mode == AllocationMode::kAllOrNothing && result.over_quota > 0) {
    // A racing writer of the same tenant took the room: all or nothing.
    std::vector<ObjectKey> staged;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (result.outcomes[i] != WriteReservation::kReserved) continue;
      staged.push_back(keys[i]);
      result.outcomes[i] = WriteReservation::kOutOfMemory;
    }
    AbortStaged(lease, staged);
  }
  LeaseRecord record{owner, LeaseKind::kWrite, {}, clock_->NowMs() + WriteTtl(owner)};
  for (const WriteReservation outcome : result.outcomes) {
    if (outcome == WriteReservation::kReserved) result.reserved += 1;
    if (outcome == WriteReservation::kOutOfMemory) result.out_of_memory += 1;
  }
  if (movable != nullptr && result.reserved == keys.size()) {
    record.keys = std::move(*movable);  // `keys` viewed it: not read again below
  } else {
    record.keys.reserve(result.reserved);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (result.outcomes[i] == WriteReservation::kReserved) record.keys.push_back(keys[i]);
    }
  }
  if (result.reserved > 0) {
    result.lease = lease;
    leases_.Add(lease, std::move(record));
  }
  if (pages_pending) {
    // All or nothing: what the first pass handed back (this writer's own
    // earlier copies, now under `lease`) is given up too, so that a caller
    // that never comes back leaves nothing staged.
    AbortWrite(result.lease);
    WriteLease pending;
    pending.outcomes.assign(result.outcomes.size(), WriteReservation::kOutOfMemory);
    pending.offsets.assign(result.outcomes.size(), 0);
    pending.pages_pending = true;
    pending.ready_bytes_seen = ready_bytes_seen;
    return pending;
  }
  return result;
}

std::vector<std::size_t> ObjectTable::FitToQuotas(std::span<const ObjectKey> keys,
                                                   std::uint64_t size,
                                                   std::vector<std::size_t> needs_memory,
                                                   AllocationMode mode, WriteLease* result) {
  const std::uint64_t aligned = allocator_->AlignedSize(size);
  // A batch is almost always one tenant's: its room, without the maps below.
  const std::string_view first_salt = keys[needs_memory.front()].cache_salt;
  const bool one_tenant = std::all_of(needs_memory.begin(), needs_memory.end(),
                                      [&](std::size_t i) { return keys[i].cache_salt == first_salt; });
  if (one_tenant) {
    const std::uint64_t wanted = aligned * needs_memory.size();
    std::uint64_t room = ledger_.Room(first_salt);
    const std::optional<std::uint64_t> limit = ledger_.LimitFor(first_salt);
    // All or nothing past the quota itself: refused whatever goes, so nothing goes.
    const bool hopeless = mode == AllocationMode::kAllOrNothing && limit && wanted > *limit;
    if (room < wanted && !hopeless) {
      EvictTenant(first_salt, wanted - room);
      room = ledger_.Room(first_salt);
    }
    const std::size_t fits = std::min<std::uint64_t>(room / aligned, needs_memory.size());
    std::size_t refused = needs_memory.size() - fits;
    if (refused > 0) ledger_.CountRefused(first_salt, refused, refused * aligned);
    if (refused > 0 && mode == AllocationMode::kAllOrNothing) refused = needs_memory.size();
    needs_memory.resize(needs_memory.size() - refused);
    result->over_quota += refused;
    counters_.over_quota_objects.fetch_add(refused, std::memory_order_relaxed);
    return needs_memory;
  }
  // Each tenant's room, made first by evicting its own oldest objects.
  std::unordered_map<std::string_view, std::uint64_t> room;
  for (const std::size_t i : needs_memory) {
    const std::string_view salt = keys[i].cache_salt;
    if (room.contains(salt)) continue;
    std::uint64_t wanted = 0;
    for (const std::size_t j : needs_memory) {
      if (keys[j].cache_salt == salt) wanted += aligned;
    }
    std::uint64_t free_room = ledger_.Room(salt);
    if (free_room < wanted) {
      EvictTenant(salt, wanted - free_room);
      free_room = ledger_.Room(salt);
    }
    room.emplace(salt, free_room);
  }
  std::vector<std::size_t> admitted;
  std::unordered_set<std::string_view> refused_tenants;
  for (const std::size_t i : needs_memory) {
    const std::string_view salt = keys[i].cache_salt;
    std::uint64_t& left = room[salt];
    if (!refused_tenants.contains(salt) && left >= aligned) {
      left -= aligned;
      admitted.push_back(i);
      continue;
    }
    // In batch order: a tenant's keys after its first refused one are refused too.
    refused_tenants.insert(salt);
    ledger_.CountRefused(salt, 1, aligned);
  }
  if (admitted.size() < needs_memory.size() && mode == AllocationMode::kAllOrNothing) {
    admitted.clear();
  }
  const std::size_t refused = needs_memory.size() - admitted.size();
  result->over_quota += refused;
  counters_.over_quota_objects.fetch_add(refused, std::memory_order_relaxed);
  return admitted;
}

WriteCompletion ObjectTable::FinishWrite(LeaseId write_lease) {
  WriteCompletion completion;
  std::optional<LeaseRecord> record = leases_.Take(write_lease, LeaseKind::kWrite);
  if (!record) return completion;
  completion.keys = std::move(record->keys);
  completion.outcomes.assign(completion.keys.size(), WriteOutcome::kNotStaged);
  std::vector<std::uint64_t> admitted_bytes;
  admitted_bytes.reserve(completion.keys.size());
  // The admitted keys: all of the lease's as a rule (then not copied: at
  // chunk size 1 a prompt's keys are 5 MB), else a copy of those admitted.
  std::vector<ObjectKey> some_admitted;
  std::span<const ObjectKey> admitted;
  {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, completion.keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t i = 0; i < completion.keys.size(); ++i) {
      ObjectShard& shard = lock.ShardOf(i);
      shard.AssertHeld();
      const AdmitStep step = shard.AdmitLocked(completion.keys[i], write_lease, now, freed.list());
      completion.outcomes[i] = step.outcome;
      if (step.outcome == WriteOutcome::kAdmitted) admitted_bytes.push_back(step.aligned_bytes);
    }
    if (admitted_bytes.size() == completion.keys.size()) {
      admitted = completion.keys;
    } else {
      for (std::size_t i = 0; i < completion.keys.size(); ++i) {
        if (completion.outcomes[i] == WriteOutcome::kAdmitted)
          some_admitted.push_back(completion.keys[i]);
      }
      admitted = some_admitted;
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
                                                        std::span<const ObjectKey> keys,
                                                        const std::vector<bool>& served_once) {
  LMC_RETURN_IF_ERROR(CheckLockCount(count));
  LMC_RETURN_IF_ERROR(ValidateKeys(keys, /*require_distinct=*/true));
  if (!served_once.empty() && served_once.size() != keys.size()) {
    return InvalidArgument("served_once names " + std::to_string(served_once.size()) +
                           " keys of " + std::to_string(keys.size()));
  }
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
  const LeaseId lease = leases_.NewId();
  std::vector<ObjectKey> admitted;
  std::vector<std::uint64_t> admitted_bytes;
  std::vector<ObjectKey> locked;
  {
    DeferredFree freed(*this);
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      ObjectShard& shard = lock.ShardOf(i);
      shard.AssertHeld();
      ResidentEntry* resident = shard.FindResidentLocked(keys[i]);
      if (write_lease != kNoLease) {
        const AdmitStep step = shard.AdmitLocked(keys[i], write_lease, now, freed.list());
        resident = step.resident;
        if (step.outcome == WriteOutcome::kAdmitted && !served_once.empty() && served_once[i]) {
          shard.MarkServedOnceLocked(keys[i], resident);
        } else if (step.outcome == WriteOutcome::kAdmitted) {
          admitted.push_back(keys[i]);
          admitted_bytes.push_back(step.aligned_bytes);
        }
      }
      if (resident == nullptr) continue;
      shard.LockReadLocked(resident, lease, reader, count, {}, now, ReadTtl(reader));
      out.grants[i] = {true, resident->offset, resident->size};
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
  DeferredFree freed(*this);
  ShardSetLock lock(*this, keys);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ObjectShard& shard = lock.ShardOf(i);
    shard.AssertHeld();
    shard.AbortLocked(keys[i], write_lease, freed.list());
  }
  return freed.size();
}

void ObjectTable::GiveBackShares(const ShardSetLock& lock, const ReadRequest& request,
                                 const std::vector<ResidentEntry*>& entries, TimeMs now,
                                 std::vector<Offset>* to_free) {
  // (A served-once copy whose last lock this was is freed.)
  for (std::size_t i = 0; i < request.keys.size(); ++i) {
    if (entries[i] == nullptr) continue;
    ObjectShard& shard = lock.ShardOf(i);
    shard.AssertHeld();
    for (const LeaseId from : request.consume) {
      if (shard.UnlockReadLocked(request.keys[i], from, 1, now, to_free) > 0) break;
    }
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
    DeferredFree freed(*this);  // after the shards are unlocked
    ShardSetLock lock(*this, keys);
    const TimeMs now = clock_->NowMs();
    std::vector<ResidentEntry*> entries(keys.size(), nullptr);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      ObjectShard& shard = lock.ShardOf(i);
      shard.AssertHeld();
      entries[i] = shard.FindResidentLocked(keys[i]);
    }
    if (request.mode == ReadMode::kAllOrNothing) {
      out.missing = static_cast<std::size_t>(std::count(entries.begin(), entries.end(), nullptr));
      if (out.missing > 0) {
        // Nothing is locked. A failed retrieve still gives its share of the
        // lookup's locks back on what it found (spec 11.5).
        if (request.release_share_on_miss)
          GiveBackShares(lock, request, entries, now, freed.list());
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
    for (std::size_t i = 0; i < out.granted; ++i) {
      ObjectShard& shard = lock.ShardOf(i);
      shard.AssertHeld();
      if (shard.LockReadLocked(entries[i], lease, request.owner, request.count, request.consume,
                               now, ReadTtl(request.owner))) {
        out.consumed += 1;
      }
      out.grants[i] = {true, entries[i]->offset, entries[i]->size};
    }
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

void ObjectTable::NotifyAdmitted(std::span<const ObjectKey> keys,
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

std::uint64_t ObjectTable::ReleaseLocked(const ShardSetLock& lock, LeaseId lease,
                                         std::span<const ObjectKey> keys, std::uint32_t count,
                                         TimeMs now, std::vector<Offset>* to_free) {
  LMC_DCHECK(lock.key_count() == keys.size());
  std::uint64_t released = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ObjectShard& shard = lock.ShardOf(i);
    shard.AssertHeld();
    released += shard.UnlockReadLocked(keys[i], lease, count, now, to_free);
  }
  return released;
}

std::uint64_t ObjectTable::ReleaseRead(LeaseId read_lease, std::span<const ObjectKey> keys,
                                       std::uint32_t count) {
  if (read_lease == kNoLease || keys.empty()) return 0;
  DeferredFree freed(*this);
  ShardSetLock lock(*this, keys);
  return ReleaseLocked(lock, read_lease, keys, count, clock_->NowMs(), freed.list());
}

std::uint64_t ObjectTable::ReleaseRead(LeaseId read_lease) {
  std::optional<LeaseRecord> record = leases_.Take(read_lease, LeaseKind::kRead);
  if (!record) return 0;
  return ReleaseRead(read_lease, record->keys, kMaxReadLockCount);
}

LMC_STATS_ROWS(TableStatRows, TableStats, LMC_TABLE_STATS)

}  // namespace lmcache::store
