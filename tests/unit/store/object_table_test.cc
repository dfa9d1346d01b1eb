// ObjectTable: the write path, exact read leases, owner release, retirement,
// eviction and reclamation.
#include "store/object_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "fakes/aligned_buffer.h"
#include "fakes/fake_clock.h"
#include "fakes/keys.h"

namespace lmcache::store {
namespace {

using testing::KeyN;
using testing::KeysN;

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kObject = 1 * kMiB;
const Owner kWriter = Owner::Instance(1);
const Owner kOtherWriter = Owner::Instance(2);
const Owner kReader = Owner::Instance(3);
const Owner kLookup = Owner::Session(4);

class ObjectTableTest : public ::testing::Test {
 protected:
  explicit ObjectTableTest(std::uint64_t pool_bytes = 16 * kMiB) : buffer_(pool_bytes) {
    alloc::SlabAllocatorConfig alloc_config;
    alloc_config.slab_target_bytes = 2 * kMiB;  // small slabs: memory returns to the pool quickly
    allocator_ = std::move(alloc::SlabAllocator::Create(buffer_.span(), alloc_config)).value();
    config_.write_ttl_ms = 600'000;
    config_.read_ttl_ms = 300'000;
    config_.num_shards = 8;
    Rebuild();
  }
  void Rebuild() {
    table_ = std::make_unique<ObjectTable>(allocator_.get(), &lru_, &clock_, config_);
  }
  WriteLease Reserve(const std::vector<ObjectKey>& keys, Owner owner = kWriter,
                     AllocationMode mode = AllocationMode::kAllOrNothing) {
    auto r = table_->ReserveWrite(keys, kObject, owner, mode);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : WriteLease{};
  }
  // Stages and admits `keys` for kWriter.
  void Store(const std::vector<ObjectKey>& keys) {
    const WriteLease lease = Reserve(keys);
    ASSERT_EQ(lease.reserved, keys.size());
    const WriteCompletion done = table_->FinishWrite(lease.lease);
    ASSERT_EQ(done.admitted, keys.size());
  }
  ReadAcquisition Read(const std::vector<ObjectKey>& keys, Owner owner = kReader,
                       ReadMode mode = ReadMode::kAllOrNothing, std::uint32_t count = 1,
                       std::vector<LeaseId> consume = {}) {
    ReadRequest request;
    request.keys = keys;
    request.owner = owner;
    request.mode = mode;
    request.count = count;
    request.consume = consume;
    auto r = table_->AcquireRead(request);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ReadAcquisition{};
  }
  bool Resident(const ObjectKey& key) {
    auto info = table_->Find(key);
    return info && info->state == ObjectState::kResident;
  }
  std::uint32_t Locks(const ObjectKey& key) {
    auto info = table_->Find(key);
    return info ? info->read_locks : 0;
  }

  testing::AlignedBuffer buffer_;
  std::unique_ptr<alloc::SlabAllocator> allocator_;
  testing::FakeClock clock_;
  LruPolicy lru_;
  ObjectTableConfig config_;
  std::unique_ptr<ObjectTable> table_;
};

// --- writes -------------------------------------------------------------------------------

TEST_F(ObjectTableTest, StagedObjectIsInvisibleToReadersUntilFinished) {
  const auto keys = KeysN(0, 3);
  const WriteLease staged = Reserve(keys);
  EXPECT_EQ(staged.reserved, 3u);
  EXPECT_NE(staged.lease, kNoLease);
  const ReadAcquisition early = Read(keys);
  EXPECT_EQ(early.granted, 0u);
  EXPECT_EQ(early.missing, 3u);
  EXPECT_EQ(table_->Stats().staging_objects, 3u);
  EXPECT_EQ(table_->Stats().staging_bytes, 3 * kObject);

  EXPECT_EQ(table_->FinishWrite(staged.lease).admitted, 3u);
  const ReadAcquisition read = Read(keys);
  ASSERT_EQ(read.granted, 3u);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(read.grants[i].granted);
    EXPECT_EQ(read.grants[i].offset, staged.offsets[i]);
    EXPECT_EQ(read.grants[i].size, kObject);
  }
  const TableStats stats = table_->Stats();
  EXPECT_EQ(stats.resident_objects, 3u);
  EXPECT_EQ(stats.staging_objects, 0u);
  EXPECT_EQ(stats.locked_objects, 3u);
  EXPECT_EQ(stats.locked_bytes, 3 * kObject);
  EXPECT_EQ(stats.read_leases, 1u);
  EXPECT_EQ(stats.write_leases, 0u);
}

TEST_F(ObjectTableTest, ReserveSkipsResidentKeys) {
  Store(KeysN(0, 2));
  const WriteLease r = Reserve(KeysN(0, 3));
  EXPECT_EQ(r.outcomes[0], WriteReservation::kAlreadyResident);
  EXPECT_EQ(r.outcomes[1], WriteReservation::kAlreadyResident);
  EXPECT_EQ(r.outcomes[2], WriteReservation::kReserved);
  EXPECT_EQ(r.reserved, 1u);
}

TEST_F(ObjectTableTest, NothingReservedMeansNoLease) {
  Store(KeysN(0, 2));
  const WriteLease r = Reserve(KeysN(0, 2));
  EXPECT_EQ(r.reserved, 0u);
  EXPECT_EQ(r.lease, kNoLease);
  EXPECT_EQ(table_->Stats().write_leases, 0u);
}

TEST_F(ObjectTableTest, RepeatedReservationBySameWriterMovesTheSameBuffersToTheNewLease) {
  const auto keys = KeysN(0, 2);
  const WriteLease first = Reserve(keys);
  const WriteLease second = Reserve(keys);
  EXPECT_EQ(first.offsets, second.offsets);
  EXPECT_NE(first.lease, second.lease);
  EXPECT_EQ(allocator_->UsedBytes(), 2 * kObject);  // nothing leaked
  EXPECT_EQ(table_->FinishWrite(first.lease).admitted, 0u);  // its copies moved on
  EXPECT_EQ(table_->FinishWrite(second.lease).admitted, 2u);
}

// A pool still being pre-faulted (issue 20): a caller that must not block
// is told the batch waits for pages, and nothing stays reserved, not even
// the copies the same writer staged before.
class WarmingObjectTableTest : public ObjectTableTest {
 protected:
  WarmingObjectTableTest() {
    allocator_ = std::move(alloc::SlabAllocator::Create(buffer_.span(), {}, 4 * kMiB)).value();
    Rebuild();
  }
  Result<WriteLease> ReserveFor(const std::vector<ObjectKey>& keys, WhilePoolWarms warming) {
    return table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kLongestPrefix, warming);
  }
};

TEST_F(WarmingObjectTableTest, ABatchThatMustWaitForPagesReservesNothingAndSaysSo) {
  const WriteLease earlier = Reserve(KeysN(0, 2));
  ASSERT_EQ(earlier.reserved, 2u);
  auto r = ReserveFor(KeysN(0, 6), WhilePoolWarms::kReportBusy);  // 6 MiB of 4 ready
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->pages_pending);
  EXPECT_EQ(r->ready_bytes_seen, 4 * kMiB);
  EXPECT_EQ(r->reserved, 0u);
  EXPECT_EQ(r->lease, kNoLease);
  EXPECT_EQ(allocator_->UsedBytes(), 0u) << "the writer's earlier copies went with it";
  EXPECT_EQ(table_->Stats().staging_objects, 0u);
  EXPECT_EQ(table_->Stats().write_leases, 1u);  // the earlier lease, now empty
  EXPECT_EQ(table_->FinishWrite(earlier.lease).admitted, 0u);
  int woken = 0;
  table_->NotifyWhenPagesReady(r->ready_bytes_seen, [&] { ++woken; });
  EXPECT_EQ(woken, 0);
  allocator_->MakeReady(8 * kMiB);
  EXPECT_EQ(woken, 1);
  auto again = ReserveFor(KeysN(0, 6), WhilePoolWarms::kReportBusy);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->pages_pending);
  EXPECT_EQ(again->reserved, 6u);
}

TEST_F(WarmingObjectTableTest, AfterItsWaitABatchTakesWhatFitsAtOnce) {
  auto r = ReserveFor(KeysN(0, 6), WhilePoolWarms::kGoOn);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->pages_pending);
  EXPECT_EQ(r->reserved, 4u);  // the ready 4 MiB; nothing cached to evict
  EXPECT_EQ(r->out_of_memory, 2u);
}

TEST_F(WarmingObjectTableTest, ABatchThatFitsTheReadyPagesNeverWaits) {
  auto r = ReserveFor(KeysN(0, 3), WhilePoolWarms::kReportBusy);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->pages_pending);
  EXPECT_EQ(r->reserved, 3u);
}

TEST_F(ObjectTableTest, FirstWriterWinsAndDuplicateIsDiscarded) {
  const auto keys = KeysN(0, 1);
  const WriteLease mine = Reserve(keys, kWriter);
  const WriteLease other = Reserve(keys, kOtherWriter);
  EXPECT_EQ(allocator_->UsedBytes(), 2 * kObject);
  EXPECT_EQ(table_->FinishWrite(other.lease).outcomes[0], WriteOutcome::kAdmitted);
  const WriteCompletion late = table_->FinishWrite(mine.lease);
  EXPECT_EQ(late.outcomes[0], WriteOutcome::kDuplicateDiscarded);
  EXPECT_EQ(late.lost, 0u);
  EXPECT_EQ(allocator_->UsedBytes(), kObject);
  EXPECT_TRUE(table_->FinishWrite(mine.lease).keys.empty());  // the lease ended
}

TEST_F(ObjectTableTest, AbortWriteFreesExactlyItsLease) {
  const WriteLease mine = Reserve(KeysN(0, 2), kWriter);
  const WriteLease other = Reserve(KeysN(0, 2), kOtherWriter);
  EXPECT_EQ(table_->AbortWrite(mine.lease), 2u);
  EXPECT_EQ(table_->AbortWrite(mine.lease), 0u);
  EXPECT_EQ(allocator_->UsedBytes(), 2 * kObject);
  EXPECT_EQ(table_->FinishWrite(other.lease).admitted, 2u);
}

TEST_F(ObjectTableTest, ExpiredWriteLeaseIsNotAdmittedAndIsReclaimed) {
  const WriteLease a = Reserve(KeysN(0, 1));
  const WriteLease b = Reserve(KeysN(1, 1));
  clock_.Advance(config_.write_ttl_ms);
  // A late commit: the worker is done writing, so its copy is freed at once.
  const WriteCompletion late = table_->FinishWrite(a.lease);
  EXPECT_EQ(late.outcomes[0], WriteOutcome::kLeaseExpired);
  EXPECT_EQ(late.lost, 1u);
  EXPECT_EQ(allocator_->UsedBytes(), kObject);
  EXPECT_EQ(table_->ReclaimExpired(), 0u);  // b's copy is quarantined, not freed
  EXPECT_EQ(table_->Stats().expired_writes_reclaimed, 1u);
  EXPECT_EQ(table_->Stats().write_leases, 0u);  // the expired record went too
  EXPECT_TRUE(table_->FinishWrite(b.lease).keys.empty());
  EXPECT_FALSE(Resident(KeyN(1)));
  EXPECT_EQ(table_->ReleaseOwner(kWriter).quarantine_released, 1u);
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
}

// A worker whose write lease expired may be slow, not gone: it copies
// through its own mapping of the pool, and nothing can stop a late write.
// Its copy's memory must not go to another object until the worker's
// registration ends (issue 20: no late write lands in reused L1 pages).
TEST_F(ObjectTableTest, AnExpiredWriteIsQuarantinedUntilItsWriterIsReleased) {
  const WriteLease slow = Reserve(KeysN(0, 2));
  Store(KeysN(10, 1));  // another worker's object, not touched by any of this
  clock_.Advance(config_.write_ttl_ms);
  table_->ReclaimExpired();
  EXPECT_EQ(allocator_->UsedBytes(), 3 * kObject) << "the expired copies were handed back for reuse";
  TableStats stats = table_->Stats();
  EXPECT_EQ(stats.quarantined_objects, 2u);
  EXPECT_EQ(stats.quarantined_bytes, 2 * kObject);
  EXPECT_EQ(stats.staging_objects, 0u);
  EXPECT_EQ(stats.retired_objects, 0u);
  // Time alone never frees them, and another owner's release does not either.
  clock_.Advance(100 * config_.write_ttl_ms);
  table_->ReclaimExpired();
  EXPECT_EQ(table_->ReleaseOwner(kOtherWriter).quarantine_released, 0u);
  EXPECT_EQ(allocator_->UsedBytes(), 3 * kObject);
  // The stalled worker's copies can never be admitted.
  EXPECT_EQ(table_->FinishWrite(slow.lease).admitted, 0u);
  EXPECT_FALSE(Resident(KeyN(0)));
  // Its registration ends (unregistered, disconnected, reaped): freed.
  EXPECT_EQ(table_->ReleaseOwner(kWriter).quarantine_released, 2u);
  stats = table_->Stats();
  EXPECT_EQ(stats.quarantined_objects, 0u);
  EXPECT_EQ(allocator_->UsedBytes(), kObject);
  EXPECT_TRUE(Resident(KeyN(10)));
}

// The server's own writers end every write lease when their copy returns
// (an L2 load into its buffers, a device copy): their copies never expire
// under them, however long a backend hangs.
TEST_F(ObjectTableTest, TheServersOwnWritesNeverExpire) {
  for (const Owner owner : {Owner::Internal(2), Owner::Device(9)}) {
    const std::vector<ObjectKey> keys = KeysN(owner.id * 100, 1);
    auto staged = table_->ReserveWrite(keys, kObject, owner, AllocationMode::kAllOrNothing);
    ASSERT_TRUE(staged.ok());
    clock_.Advance(1000 * config_.write_ttl_ms);
    table_->ReclaimExpired();
    EXPECT_EQ(table_->FinishWrite(staged->lease).admitted, 1u) << owner.DebugString();
  }
}

TEST_F(ObjectTableTest, FinishWriteAndReadAdmitsAlreadyLocked) {
  const auto keys = KeysN(0, 3);
  Store(KeysN(1, 1));  // another writer won chunk 1 meanwhile
  const WriteLease staged = Reserve(keys, Owner::Internal(9));
  auto landed = table_->FinishWriteAndRead(staged.lease, kLookup, 2);
  ASSERT_TRUE(landed.ok());
  EXPECT_EQ(landed->granted, 2u);  // chunk 1 was resident already: it was not staged
  EXPECT_EQ(Locks(KeyN(0)), 2u);
  EXPECT_EQ(Locks(KeyN(1)), 0u);
  EXPECT_EQ(Locks(KeyN(2)), 2u);
  // Eviction cannot slip in: the loaded objects are locked from the moment they exist.
  EXPECT_EQ(table_->EvictLru(100 * kMiB).objects, 1u);  // only chunk 1 went
  EXPECT_EQ(table_->ReleaseRead(landed->lease), 4u);
  EXPECT_EQ(table_->Stats().locked_objects, 0u);
}

// Reference PR #4529 (racing prefetch loads dropped valid hits): a chunk
// another load brought in between the lookup and the reservation is not
// staged again, and is still locked for the reader with the ones loaded.
TEST_F(ObjectTableTest, FinishWriteAndReadOfKeysAlsoLocksWhatWasResidentBeforeTheReservation) {
  const auto keys = KeysN(0, 3);
  Store(KeysN(1, 1));
  const WriteLease staged = Reserve(keys, Owner::Internal(9));
  ASSERT_EQ(staged.outcomes[1], WriteReservation::kAlreadyResident);
  auto landed = table_->FinishWriteAndRead(staged.lease, kLookup, 2, keys);
  ASSERT_TRUE(landed.ok());
  EXPECT_EQ(landed->granted, 3u);
  ASSERT_EQ(landed->grants.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(landed->grants[i].granted) << i;
    EXPECT_EQ(Locks(KeyN(i)), 2u) << i;
  }
  EXPECT_EQ(table_->ReleaseRead(landed->lease), 6u);
  // With nothing staged at all (every key resident), only the locks are taken.
  auto only_locks = table_->FinishWriteAndRead(kNoLease, kLookup, 1, keys);
  ASSERT_TRUE(only_locks.ok());
  EXPECT_EQ(only_locks->granted, 3u);
  EXPECT_EQ(table_->ReleaseRead(only_locks->lease), 3u);
  EXPECT_EQ(table_->Stats().locked_objects, 0u);
  EXPECT_EQ(table_->Stats().write_leases, 0u);
}

// An L2 load whose chunk an operator force-deleted while it landed: the
// load's copy was retired, and landing it (FinishWriteAndRead naming the
// key) must free it. A server writer's lease never expires, so nothing else
// ever would: the slot leaked for the life of the server.
TEST_F(ObjectTableTest, FinishWriteAndReadFreesTheCopyAForcedDeleteRetired) {
  const auto keys = KeysN(0, 2);
  const WriteLease staged = Reserve(keys, Owner::Internal(9));
  ASSERT_EQ(staged.reserved, 2u);
  ASSERT_EQ(table_->Delete(KeysN(0, 1), /*force=*/true)[0], DeleteOutcome::kDeleted);
  EXPECT_EQ(table_->Stats().retired_objects, 1u);
  auto landed = table_->FinishWriteAndRead(staged.lease, kLookup, 1, keys);
  ASSERT_TRUE(landed.ok());
  EXPECT_EQ(landed->granted, 1u);  // chunk 1 only: chunk 0 is gone
  EXPECT_FALSE(landed->grants[0].granted);
  EXPECT_EQ(table_->Stats().retired_objects, 0u);
  EXPECT_EQ(allocator_->UsedBytes(), kObject);
  table_->ReleaseRead(landed->lease);
  EXPECT_EQ(table_->Delete(KeysN(1, 1), false)[0], DeleteOutcome::kDeleted);
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
}

// --- exact read leases --------------------------------------------------------------------

TEST_F(ObjectTableTest, FinishWriteAndReadKeepsALeadingPartAndFreesTheRest) {
  const auto keys = KeysN(0, 4);
  const WriteLease staged = Reserve(keys, Owner::Internal(2));
  auto locked = table_->FinishWriteAndRead(staged.lease, kLookup, 2, std::span(keys).first(2));
  ASSERT_TRUE(locked.ok());
  EXPECT_EQ(locked->granted, 2u);
  EXPECT_EQ(locked->grants.size(), 2u);
  EXPECT_EQ(Locks(KeyN(0)), 2u);
  EXPECT_EQ(Locks(KeyN(1)), 2u);
  EXPECT_FALSE(table_->Find(KeyN(2)));
  EXPECT_FALSE(table_->Find(KeyN(3)));
  EXPECT_EQ(allocator_->UsedBytes(), 2 * kObject);
  EXPECT_EQ(table_->Stats().write_leases, 0u);
  table_->ReleaseRead(locked->lease);
  EXPECT_EQ(table_->Stats().read_leases, 0u);
}

TEST_F(ObjectTableTest, ReadModesAndGroups) {
  Store({KeyN(0), KeyN(1), KeyN(3)});
  const auto keys = KeysN(0, 4);  // 2 is missing
  const ReadAcquisition prefix = Read(keys, kReader, ReadMode::kPrefix);
  EXPECT_EQ(prefix.granted, 2u);
  EXPECT_TRUE(prefix.grants[1].granted && !prefix.grants[2].granted && !prefix.grants[3].granted);
  const ReadAcquisition all = Read(keys, kReader, ReadMode::kAllOrNothing);
  EXPECT_EQ(all.granted, 0u);
  EXPECT_EQ(all.missing, 1u);
  EXPECT_EQ(all.lease, kNoLease);
  // Groups of two (two ranks per chunk): the group {2, 3} is incomplete, so 3 is never locked.
  ReadRequest grouped;
  grouped.keys = keys;
  grouped.owner = kLookup;
  grouped.mode = ReadMode::kPrefix;
  grouped.group = 2;
  auto chunks = table_->AcquireRead(grouped);
  ASSERT_TRUE(chunks.ok());
  EXPECT_EQ(chunks->granted, 2u);
  EXPECT_EQ(Locks(KeyN(3)), 0u);
  grouped.group = 3;
  EXPECT_EQ(table_->AcquireRead(grouped).status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(ObjectTableTest, AReleaseReleasesOnlyItsOwnLease) {
  Store(KeysN(0, 1));
  const ReadAcquisition a = Read(KeysN(0, 1), kReader);
  const ReadAcquisition b = Read(KeysN(0, 1), kOtherWriter);
  ASSERT_NE(a.lease, b.lease);
  EXPECT_EQ(Locks(KeyN(0)), 2u);
  EXPECT_EQ(table_->ReleaseRead(a.lease), 1u);
  EXPECT_EQ(table_->ReleaseRead(a.lease), 0u);  // ended: a second release finds nothing
  EXPECT_EQ(Locks(KeyN(0)), 1u);                // b's lock is untouched
  EXPECT_EQ(table_->EvictLru(kObject).objects, 0u);
  EXPECT_EQ(table_->ReleaseRead(b.lease), 1u);
  EXPECT_EQ(table_->EvictLru(kObject).objects, 1u);
}

TEST_F(ObjectTableTest, ReadersConsumeTheirShareOfALookupAndReleaseOnlyTheirOwn) {
  Store(KeysN(0, 2));
  // A lookup for two readers (MLA: two TP ranks read each object).
  const ReadAcquisition lookup = Read(KeysN(0, 2), kLookup, ReadMode::kPrefix, 2);
  EXPECT_EQ(Locks(KeyN(0)), 2u);
  const ReadAcquisition first = Read(KeysN(0, 2), kReader, ReadMode::kAllOrNothing, 1,
                                     {lookup.lease});
  EXPECT_EQ(first.consumed, 2u);
  EXPECT_EQ(Locks(KeyN(0)), 2u);  // moved, not added
  const ReadAcquisition second = Read(KeysN(0, 2), kOtherWriter, ReadMode::kAllOrNothing, 1,
                                      {lookup.lease});
  EXPECT_EQ(second.consumed, 2u);
  const ReadAcquisition third = Read(KeysN(0, 2), Owner::Instance(7), ReadMode::kAllOrNothing, 1,
                                     {lookup.lease});
  EXPECT_EQ(third.consumed, 0u);  // the lookup's share is used up: locked afresh
  EXPECT_EQ(Locks(KeyN(0)), 3u);
  EXPECT_EQ(table_->ReleaseRead(first.lease), 2u);
  EXPECT_EQ(table_->ReleaseRead(lookup.lease), 0u);  // nothing left of it
  EXPECT_EQ(Locks(KeyN(0)), 2u);
  table_->ReleaseRead(second.lease);
  table_->ReleaseRead(third.lease);
  EXPECT_EQ(table_->Stats().locked_objects, 0u);
  EXPECT_EQ(table_->Stats().read_leases, 0u);
}

TEST_F(ObjectTableTest, AnExpiredLookupLeaseIsNeverConsumedAndReadsLockAfresh) {
  Store(KeysN(0, 1));
  const ReadAcquisition lookup = Read(KeysN(0, 1), kLookup, ReadMode::kPrefix);
  clock_.Advance(config_.read_ttl_ms);
  EXPECT_EQ(Locks(KeyN(0)), 0u);  // expired: evictable, still resident
  const ReadAcquisition reader =
      Read(KeysN(0, 1), kReader, ReadMode::kAllOrNothing, 1, {lookup.lease});
  EXPECT_EQ(reader.granted, 1u);
  EXPECT_EQ(reader.consumed, 0u);
  EXPECT_EQ(Locks(KeyN(0)), 1u);
  EXPECT_EQ(table_->EvictLru(kObject).objects, 0u);
}

TEST_F(ObjectTableTest, AFailedReadTakesNothingAndCanGiveItsShareBack) {
  Store(KeysN(0, 2));
  const ReadAcquisition lookup = Read(KeysN(0, 2), kLookup, ReadMode::kPrefix, 2);
  ReadRequest request;
  const std::vector<ObjectKey> keys = KeysN(0, 3);  // chunk 2 is not there
  request.keys = keys;
  request.owner = kReader;
  request.consume = std::span(&lookup.lease, 1);
  request.release_share_on_miss = true;
  auto failed = table_->AcquireRead(request);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->granted, 0u);
  EXPECT_EQ(failed->missing, 1u);
  EXPECT_EQ(Locks(KeyN(0)), 1u);  // this reader's share of the lookup went back
  EXPECT_EQ(Locks(KeyN(1)), 1u);
  EXPECT_EQ(table_->Stats().read_leases, 1u);  // only the lookup's
}

TEST_F(ObjectTableTest, PartialReleaseOfALeaseKeepsTheRestLocked) {
  Store(KeysN(0, 4));
  const ReadAcquisition lookup = Read(KeysN(0, 4), kLookup, ReadMode::kPrefix, 3);
  EXPECT_EQ(table_->ReleaseRead(lookup.lease, KeysN(2, 2)), 6u);
  EXPECT_EQ(table_->ReleaseRead(lookup.lease, KeysN(2, 2)), 0u);  // idempotent
  EXPECT_EQ(Locks(KeyN(1)), 3u);
  EXPECT_EQ(Locks(KeyN(2)), 0u);
  EXPECT_EQ(table_->ReleaseRead(lookup.lease), 6u);
}

TEST_F(ObjectTableTest, ExtendAddsAWindowToTheSameLease) {
  Store(KeysN(0, 4));
  const ReadAcquisition first = Read(KeysN(0, 2), kLookup, ReadMode::kPrefix);
  ReadRequest more;
  const std::vector<ObjectKey> keys = KeysN(2, 2);
  more.keys = keys;
  more.owner = kLookup;
  more.mode = ReadMode::kPrefix;
  more.extend = first.lease;
  auto second = table_->AcquireRead(more);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->lease, first.lease);
  EXPECT_EQ(table_->Stats().read_leases, 1u);
  EXPECT_EQ(table_->ReleaseRead(first.lease), 4u);
}

TEST_F(ObjectTableTest, ReadCountsAreBounded) {
  Store(KeysN(0, 2));
  ReadRequest request;
  const std::vector<ObjectKey> keys = KeysN(0, 2);
  request.keys = keys;
  request.owner = kReader;
  request.count = 0;
  EXPECT_EQ(table_->AcquireRead(request).status().code(), ErrorCode::kInvalidArgument);
  request.count = 129;
  EXPECT_EQ(table_->AcquireRead(request).status().code(), ErrorCode::kInvalidArgument);
  request.count = 128;
  EXPECT_TRUE(table_->AcquireRead(request).ok());
}

// --- owners, retirement, clear ------------------------------------------------------------

TEST_F(ObjectTableTest, ReleaseOwnerDropsItsReadsAndWritesOnly) {
  Store(KeysN(0, 2));
  Read(KeysN(0, 2), kReader, ReadMode::kAllOrNothing, 3);
  Read(KeysN(0, 1), kOtherWriter);
  Reserve(KeysN(10, 2), kReader);
  const OwnerReleaseReport report = table_->ReleaseOwner(kReader);
  EXPECT_EQ(report.read_locks_released, 6u);
  EXPECT_EQ(report.writes_aborted, 2u);
  EXPECT_EQ(Locks(KeyN(0)), 1u);  // kOtherWriter's stays
  EXPECT_EQ(Locks(KeyN(1)), 0u);
  EXPECT_FALSE(table_->Find(KeyN(10)));
  EXPECT_EQ(allocator_->UsedBytes(), 2 * kObject);
  EXPECT_EQ(table_->ReleaseOwner(kReader).read_locks_released, 0u);
}

TEST_F(ObjectTableTest, DeleteRefusesLockedUnlessForced) {
  Store(KeysN(0, 2));
  Read(KeysN(0, 1));
  auto outcomes = table_->Delete(KeysN(0, 3), /*force=*/false);
  EXPECT_EQ(outcomes[0], DeleteOutcome::kLocked);
  EXPECT_EQ(outcomes[1], DeleteOutcome::kDeleted);
  EXPECT_EQ(outcomes[2], DeleteOutcome::kNotFound);
  EXPECT_TRUE(Resident(KeyN(0)));
  EXPECT_EQ(lru_.size(), 1u);
}

TEST_F(ObjectTableTest, ForcedDeleteOfLockedObjectKeepsMemoryUntilItsLeaseEnds) {
  Store(KeysN(0, 1));
  const ReadAcquisition reading = Read(KeysN(0, 1));
  EXPECT_EQ(table_->Delete(KeysN(0, 1), /*force=*/true)[0], DeleteOutcome::kDeleted);
  EXPECT_FALSE(table_->Find(KeyN(0)));
  EXPECT_EQ(table_->Stats().retired_objects, 1u);
  // The reader is still copying out of its slot: a new object must not get it.
  const WriteLease other = Reserve(KeysN(5, 1));
  EXPECT_NE(other.offsets[0], reading.grants[0].offset);
  EXPECT_EQ(table_->ReleaseRead(reading.lease), 1u);
  EXPECT_EQ(table_->Stats().retired_objects, 0u);
  EXPECT_EQ(allocator_->UsedBytes(), kObject);  // only the new staging copy
}

TEST_F(ObjectTableTest, ForcedDeleteOfStagingIsFreedWhenWriterFinishes) {
  const auto keys = KeysN(0, 1);
  const WriteLease staged = Reserve(keys);
  EXPECT_EQ(table_->Delete(keys, /*force=*/false)[0], DeleteOutcome::kLocked);
  EXPECT_EQ(table_->Delete(keys, /*force=*/true)[0], DeleteOutcome::kDeleted);
  EXPECT_EQ(allocator_->UsedBytes(), kObject);  // the writer may still be copying in
  EXPECT_EQ(table_->FinishWrite(staged.lease).outcomes[0], WriteOutcome::kNotStaged);
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
  EXPECT_FALSE(table_->Find(keys[0]));
}

TEST_F(ObjectTableTest, ClearHonoursLocksUnlessForced) {
  Store(KeysN(0, 4));
  Read(KeysN(0, 1));
  EXPECT_EQ(table_->Clear(/*force=*/false), 3u);
  EXPECT_TRUE(Resident(KeyN(0)));
  EXPECT_EQ(table_->Clear(/*force=*/true), 1u);
  EXPECT_EQ(table_->Stats().resident_objects, 0u);
  clock_.Advance(config_.read_ttl_ms);  // the reader never came back
  EXPECT_EQ(table_->ReclaimExpired(), 1u);
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
  EXPECT_EQ(table_->Stats().read_leases, 0u);
}

// --- eviction -----------------------------------------------------------------------------

TEST_F(ObjectTableTest, ExpiredReadLeaseStillReadableButEvictable) {
  Store(KeysN(0, 1));
  const ReadAcquisition first = Read(KeysN(0, 1));
  EXPECT_EQ(table_->EvictLru(kObject).objects, 0u);  // locked
  clock_.Advance(config_.read_ttl_ms);
  const ReadAcquisition again = Read(KeysN(0, 1));
  EXPECT_EQ(again.granted, 1u);  // still resident: reading it is fine
  table_->ReleaseRead(again.lease);
  table_->ReleaseRead(first.lease);
  EXPECT_EQ(table_->EvictLru(kObject).objects, 1u);
}

TEST_F(ObjectTableTest, EvictLruTakesOldestUnlockedTailFirst) {
  Store(KeysN(0, 4));   // prompt A: chunks 0..3
  Store(KeysN(10, 2));  // prompt B, newer
  Read(std::vector{KeyN(3)});
  const EvictionReport report = table_->EvictLru(2 * kObject);
  EXPECT_EQ(report.objects, 2u);
  EXPECT_EQ(report.bytes, 2 * kObject);
  EXPECT_TRUE(Resident(KeyN(3)));   // locked: skipped
  EXPECT_FALSE(Resident(KeyN(2)));  // the tail of A went first
  EXPECT_FALSE(Resident(KeyN(1)));
  EXPECT_TRUE(Resident(KeyN(0)));  // A's head stays
  EXPECT_TRUE(Resident(KeyN(10)));
}

TEST_F(ObjectTableTest, OnDemandEvictionMakesRoomForAStore) {
  Store(KeysN(0, 16));  // the 16 MiB pool is full
  const WriteLease r = Reserve(KeysN(100, 4));
  EXPECT_EQ(r.reserved, 4u);
  EXPECT_EQ(table_->Stats().on_demand_evictions, 1u);
  EXPECT_EQ(table_->Stats().resident_objects, 12u);
  EXPECT_TRUE(Resident(KeyN(0)));  // heads survive
}

TEST_F(ObjectTableTest, WithoutOnDemandEvictionAllOrNothingFailsWhole) {
  config_.on_demand_eviction = false;
  Rebuild();
  Store(KeysN(0, 14));
  const WriteLease r = Reserve(KeysN(100, 4));
  EXPECT_EQ(r.reserved, 0u);
  EXPECT_EQ(r.out_of_memory, 4u);
  EXPECT_EQ(allocator_->UsedBytes(), 14 * kObject);
  const WriteLease prefix = Reserve(KeysN(100, 4), kWriter, AllocationMode::kLongestPrefix);
  EXPECT_EQ(prefix.reserved, 2u);
  EXPECT_EQ(prefix.outcomes[0], WriteReservation::kReserved);
  EXPECT_EQ(prefix.outcomes[1], WriteReservation::kReserved);
  EXPECT_EQ(prefix.outcomes[2], WriteReservation::kOutOfMemory);
}

TEST_F(ObjectTableTest, LockedObjectsAreNeverEvictedOnDemand) {
  Store(KeysN(0, 16));
  Read(KeysN(0, 16));
  const WriteLease r = Reserve(KeysN(100, 1));
  EXPECT_EQ(r.out_of_memory, 1u);
  EXPECT_EQ(table_->Stats().resident_objects, 16u);
}

TEST_F(ObjectTableTest, InvalidInputIsRejected) {
  EXPECT_EQ(
      table_->ReserveWrite(KeysN(0, 1), 0, kWriter, AllocationMode::kAllOrNothing).status().code(),
      ErrorCode::kInvalidArgument);
  auto dup = std::vector{KeyN(1), KeyN(1)};
  EXPECT_EQ(
      table_->ReserveWrite(dup, kObject, kWriter, AllocationMode::kAllOrNothing).status().code(),
      ErrorCode::kInvalidArgument);
  auto bad = KeyN(1);
  bad.cache_salt = "a/b";
  EXPECT_EQ(table_->ReserveWrite(std::vector{bad}, kObject, kWriter, AllocationMode::kAllOrNothing)
                .status()
                .code(),
            ErrorCode::kInvalidKey);
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
}

// A batch's keys are checked once per run of equal strings: a bad key after
// good ones is still refused, whether its strings or its numbers are bad,
// and nothing of the batch is reserved or locked.
TEST_F(ObjectTableTest, ABadKeyAfterGoodOnesIsRefused) {
  Store(KeysN(0, 3));
  std::vector<ObjectKey> bad_salt = KeysN(0, 3);
  bad_salt[2].cache_salt = "a/b";
  std::vector<ObjectKey> bad_model = KeysN(0, 3);
  bad_model[1].model_name = "a@b";
  std::vector<ObjectKey> bad_rank = KeysN(0, 3);  // the same strings as the key before it
  bad_rank[2].kv_rank = -1;
  std::vector<ObjectKey> bad_group = KeysN(0, 3);
  bad_group[1].object_group_id = -2;
  for (const auto& keys : {bad_salt, bad_model, bad_rank, bad_group}) {
    EXPECT_EQ(
        table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kAllOrNothing).status().code(),
        ErrorCode::kInvalidKey);
    ReadRequest request;
    request.keys = keys;
    request.owner = kReader;
    EXPECT_EQ(table_->AcquireRead(request).status().code(), ErrorCode::kInvalidKey);
  }
  EXPECT_EQ(table_->Stats().locked_objects, 0u);
  EXPECT_EQ(table_->Stats().resident_objects, 3u);
}

TEST_F(ObjectTableTest, TouchReordersEviction) {
  Store(KeysN(0, 1));
  Store(KeysN(1, 1));
  table_->Touch(KeysN(0, 1));
  EXPECT_EQ(table_->EvictLru(1).objects, 1u);
  EXPECT_TRUE(Resident(KeyN(0)));
  EXPECT_FALSE(Resident(KeyN(1)));
}

// --- listeners ----------------------------------------------------------------------------

// Records what a listener hears, as (event, key index, bytes, source).
class RecordingListener : public StoreListener {
 public:
  struct Event {
    char kind;  // 'a'dmitted, 'e'victed, 'd'eleted
    ObjectKey key;
    std::uint64_t bytes;
    AdmissionSource source;
  };
  void OnAdmitted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes,
                  AdmissionSource source) override {
    Record('a', keys, bytes, source);
  }
  void OnEvicted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes) override {
    Record('e', keys, bytes, AdmissionSource::kWriter);
  }
  void OnDeleted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes) override {
    Record('d', keys, bytes, AdmissionSource::kWriter);
  }
  std::size_t Count(char kind) const {
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [kind](const Event& e) { return e.kind == kind; }));
  }
  std::vector<Event> events;

 private:
  void Record(char kind, std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes,
              AdmissionSource source) {
    ASSERT_EQ(keys.size(), bytes.size());
    for (std::size_t i = 0; i < keys.size(); ++i) events.push_back({kind, keys[i], bytes[i], source});
  }
};

TEST_F(ObjectTableTest, ListenersHearAdmissionsWithTheirSourceButNotDuplicatesOrAborts) {
  RecordingListener heard;
  table_->AddListener(&heard);
  Store(KeysN(0, 2));
  const WriteLease aborted = Reserve(KeysN(5, 1));
  table_->AbortWrite(aborted.lease);
  const WriteLease duplicate = Reserve(KeysN(0, 1), kOtherWriter);  // already resident: skipped
  EXPECT_EQ(duplicate.reserved, 0u);
  const WriteLease from_tier = Reserve(KeysN(7, 1), Owner::Internal(1));
  ASSERT_TRUE(table_->FinishWriteAndRead(from_tier.lease, kReader, 1).ok());

  ASSERT_EQ(heard.events.size(), 3u);
  EXPECT_EQ(heard.events[0].key, KeyN(0));
  EXPECT_EQ(heard.events[0].bytes, kObject);
  EXPECT_EQ(heard.events[0].source, AdmissionSource::kWriter);
  EXPECT_EQ(heard.events[1].key, KeyN(1));
  EXPECT_EQ(heard.events[2].key, KeyN(7));
  EXPECT_EQ(heard.events[2].source, AdmissionSource::kTier);
}

TEST_F(ObjectTableTest, ListenersHearEvictionsAndDeletionsOnce) {
  RecordingListener heard;
  table_->AddListener(&heard);
  Store(KeysN(0, 16));                   // the pool is full
  const WriteLease more = Reserve(KeysN(100, 2));  // on demand: evicts two tails
  EXPECT_EQ(more.reserved, 2u);
  EXPECT_EQ(heard.Count('e'), 2u);
  EXPECT_EQ(table_->EvictLru(3 * kObject).objects, 3u);
  EXPECT_EQ(heard.Count('e'), 5u);
  Read(KeysN(0, 1));
  EXPECT_EQ(table_->Delete(KeysN(0, 2), /*force=*/false)[1], DeleteOutcome::kDeleted);
  EXPECT_EQ(heard.Count('d'), 1u);  // the locked one stays and is not reported
  table_->Delete(KeysN(0, 1), /*force=*/true);  // retired while read: reported now, once
  EXPECT_EQ(heard.Count('d'), 2u);
  const std::uint64_t left = table_->Stats().resident_objects;
  EXPECT_EQ(table_->Clear(/*force=*/false), left);
  EXPECT_EQ(heard.Count('d'), 2u + left);
  std::uint64_t evicted_bytes = 0;
  for (const auto& e : heard.events) evicted_bytes += e.kind == 'e' ? e.bytes : 0;
  EXPECT_EQ(evicted_bytes, 5 * kObject);
}


// Served once (a peer's chunk a server does not keep, --p2p-keep-loaded
// false): admitted already locked, so its readers (a lookup's lease, then
// the retrieve that takes its share) find and read it as any object, but
// no listener hears of it (no KV event, no write-behind), eviction never
// picks it, and it is freed when its last lock is released or, its leases
// expired, at the next reclaim.
TEST_F(ObjectTableTest, AServedOnceObjectIsFreedWithItsLastLockAndHeardOfByNobody) {
  RecordingListener heard;
  table_->AddListener(&heard);
  const std::uint64_t used_before = allocator_->Stats().used_bytes;
  const auto keys = KeysN(0, 3);
  const WriteLease staged = Reserve(keys, Owner::Internal(9));
  const std::vector<bool> once = {true, false, true};
  auto landed = table_->FinishWriteAndRead(staged.lease, kLookup, 1, keys, once);
  ASSERT_TRUE(landed.ok());
  ASSERT_EQ(landed->granted, 3u);
  ASSERT_EQ(heard.events.size(), 1u);  // only the kept one
  EXPECT_EQ(heard.events[0].key, KeyN(1));
  EXPECT_TRUE(Resident(KeyN(0)));
  EXPECT_EQ(table_->Stats().served_once_objects, 2u);
  // The retrieve takes its share of the lookup's locks: still there while it reads.
  const ReadAcquisition retrieve = Read({KeyN(0)}, kReader, ReadMode::kAllOrNothing, 1, {landed->lease});
  ASSERT_EQ(retrieve.granted, 1u);
  EXPECT_EQ(table_->EvictLru(100 * kMiB).objects, 0u);  // locked, and never a candidate
  EXPECT_EQ(table_->ReleaseRead(retrieve.lease), 1u);
  EXPECT_FALSE(Resident(KeyN(0)));  // its last lock went: freed
  EXPECT_EQ(table_->Stats().served_once_dropped, 1u);
  // Key 2's lock expires instead: reclaimed, not evicted.
  table_->ReleaseRead(landed->lease, std::vector{KeyN(1)});
  clock_.Advance(config_.read_ttl_ms);
  EXPECT_EQ(table_->EvictLru(100 * kMiB).objects, 1u);  // key 1, kept, unlocked: evictable
  EXPECT_TRUE(Resident(KeyN(2)));
  table_->ReclaimExpired();
  EXPECT_FALSE(Resident(KeyN(2)));
  EXPECT_EQ(table_->Stats().served_once_dropped, 2u);
  EXPECT_EQ(table_->Stats().served_once_objects, 0u);
  EXPECT_EQ(table_->Stats().resident_objects, 0u);
  EXPECT_EQ(allocator_->Stats().used_bytes, used_before);
  EXPECT_EQ(heard.Count('d') + heard.Count('e'), 1u);  // key 1's eviction only
}

// A retrieve that finds part of its keys missing gives its share of the
// lookup's locks back (spec 11.5): the last lock of a served-once object
// goes there too, and its memory with it.
TEST_F(ObjectTableTest, AServedOnceObjectWhoseShareIsGivenBackIsFreed) {
  const std::uint64_t used_before = allocator_->Stats().used_bytes;
  const auto keys = KeysN(0, 1);
  const WriteLease staged = Reserve(keys, Owner::Internal(9));
  auto landed = table_->FinishWriteAndRead(staged.lease, kLookup, 1, keys, std::vector<bool>{true});
  ASSERT_TRUE(landed.ok());
  ReadRequest failing;
  const std::vector<ObjectKey> asked = {KeyN(0), KeyN(5)};  // key 5 is not there
  const std::vector<LeaseId> consume = {landed->lease};
  failing.keys = asked;
  failing.owner = kReader;
  failing.consume = consume;
  failing.release_share_on_miss = true;
  auto missed = table_->AcquireRead(failing);
  ASSERT_TRUE(missed.ok());
  EXPECT_EQ(missed->granted, 0u);
  EXPECT_FALSE(Resident(KeyN(0)));
  EXPECT_EQ(allocator_->Stats().used_bytes, used_before);
}

// Stats keeps running figures instead of walking every object (a walk cost
// 49 ms at 157k objects, under the shard locks, on every scrape): random
// stores, reads, releases, deletes, evictions and lock expiries, and after
// each step its resident and lock figures equal what Find says of each key.
TEST_F(ObjectTableTest, StatsFiguresMatchEveryObjectThroughRandomOperations) {
  constexpr std::uint64_t kKeys = 12;  // the 16 MiB pool holds fewer: stores evict
  std::mt19937_64 rng(2026);
  std::vector<LeaseId> leases;
  const std::uint64_t aligned = allocator_->AlignedSize(kObject);
  for (int step = 0; step < 3000; ++step) {
    const ObjectKey key = KeyN(rng() % kKeys);
    switch (rng() % 7) {
      case 0:
      case 1:
        if (!Resident(key)) {
          auto r = table_->ReserveWrite(std::vector<ObjectKey>{key}, kObject, kWriter,
                                        AllocationMode::kAllOrNothing);
          if (r.ok() && r->reserved == 1) table_->FinishWrite(r->lease);
        }
        break;
      case 2: {
        ReadRequest request;
        const std::vector<ObjectKey> keys{key};
        request.keys = keys;
        request.owner = kReader;
        request.count = 1 + static_cast<std::uint32_t>(rng() % 3);
        auto r = table_->AcquireRead(request);
        if (r.ok() && r->granted > 0) leases.push_back(r->lease);
        break;
      }
      case 3:
        if (!leases.empty()) {
          const std::size_t i = rng() % leases.size();
          table_->ReleaseRead(leases[i]);
          leases.erase(leases.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 4: table_->Delete(std::vector<ObjectKey>{key}, /*force=*/rng() % 2 == 0); break;
      case 5: table_->EvictLru(kObject * (1 + rng() % 3)); break;
      case 6: clock_.Advance(rng() % 4 == 0 ? config_.read_ttl_ms + 1 : 1000); break;
    }
    std::uint64_t resident = 0, locked = 0, locks = 0;
    for (std::uint64_t k = 0; k < kKeys; ++k) {
      if (!Resident(KeyN(k))) continue;
      resident += 1;
      const std::uint32_t n = Locks(KeyN(k));
      locked += n > 0 ? 1 : 0;
      locks += n;
    }
    const TableStats stats = table_->Stats();
    ASSERT_EQ(stats.resident_objects, resident) << "step " << step;
    ASSERT_EQ(stats.resident_bytes, resident * aligned) << "step " << step;
    ASSERT_EQ(stats.locked_objects, locked) << "step " << step;
    ASSERT_EQ(stats.locked_bytes, locked * aligned) << "step " << step;
    ASSERT_EQ(stats.read_locks, locks) << "step " << step;
  }
}

// --- quotas (tenant_ledger.h) ---------------------------------------------------------

ObjectKey TenantKey(std::uint64_t n, const std::string& salt) {
  ObjectKey key = KeyN(n);
  key.cache_salt = salt;
  return key;
}
std::vector<ObjectKey> TenantKeys(std::uint64_t first, std::size_t count, const std::string& salt) {
  std::vector<ObjectKey> keys;
  for (std::size_t i = 0; i < count; ++i) keys.push_back(TenantKey(first + i, salt));
  return keys;
}

TEST_F(ObjectTableTest, ATenantAtItsQuotaEvictsItsOwnOldestObjectsAndNoOneElses) {
  ASSERT_TRUE(table_->SetQuota("a", 4 * kObject).ok());
  Store(TenantKeys(100, 4, "b"));  // another tenant, older than all of a's
  for (std::uint64_t n = 0; n < 10; n += 2) {
    const WriteLease lease = Reserve(TenantKeys(n, 2, "a"), kWriter, AllocationMode::kLongestPrefix);
    ASSERT_EQ(lease.reserved, 2u) << n;
    ASSERT_EQ(table_->FinishWrite(lease.lease).admitted, 2u);
    EXPECT_LE(table_->tenants().Get("a").used_bytes, 4 * kObject);
  }
  // a keeps its 4 newest, b keeps everything.
  for (std::uint64_t n = 0; n < 6; ++n) EXPECT_FALSE(Resident(TenantKey(n, "a"))) << n;
  for (std::uint64_t n = 6; n < 10; ++n) EXPECT_TRUE(Resident(TenantKey(n, "a"))) << n;
  for (std::uint64_t n = 100; n < 104; ++n) EXPECT_TRUE(Resident(TenantKey(n, "b"))) << n;
  const TenantAccount a = table_->tenants().Get("a");
  EXPECT_EQ(a.used_bytes, 4 * kObject);
  EXPECT_EQ(a.quota_evicted_objects, 6u);
  EXPECT_EQ(a.refused_objects, 0u);
  EXPECT_EQ(table_->tenants().Get("b").used_bytes, 4 * kObject);
  EXPECT_EQ(table_->Stats().quota_evictions, 6u);
}

TEST_F(ObjectTableTest, ATenantWhoseObjectsAreLockedIsRefusedBeyondItsQuota) {
  ASSERT_TRUE(table_->SetQuota("a", 3 * kObject).ok());
  Store(TenantKeys(0, 2, "a"));
  const ReadAcquisition held = Read(TenantKeys(0, 2, "a"));
  ASSERT_EQ(held.granted, 2u);
  // Room for one more: the leading key is staged, the rest refused.
  const WriteLease lease = Reserve(TenantKeys(10, 3, "a"), kWriter, AllocationMode::kLongestPrefix);
  EXPECT_EQ(lease.reserved, 1u);
  EXPECT_EQ(lease.outcomes[0], WriteReservation::kReserved);
  EXPECT_EQ(lease.outcomes[1], WriteReservation::kOutOfMemory);
  EXPECT_EQ(lease.out_of_memory, 2u);
  EXPECT_EQ(lease.over_quota, 2u);
  EXPECT_EQ(table_->tenants().Get("a").used_bytes, 3 * kObject);  // staged bytes count
  EXPECT_EQ(table_->Stats().over_quota_objects, 2u);
  EXPECT_EQ(table_->tenants().Get("a").refused_objects, 2u);
  // All or nothing: nothing.
  const WriteLease none = Reserve(TenantKeys(20, 2, "a"));
  EXPECT_EQ(none.reserved, 0u);
  EXPECT_EQ(none.over_quota, 2u);
  // Nothing was evicted for them, and the pool had room: the quota refused.
  EXPECT_EQ(table_->Stats().quota_evictions, 0u);
  EXPECT_EQ(allocator_->UsedBytes(), 3 * kObject);
  // Aborting the staged copy and releasing the locks makes room again.
  table_->AbortWrite(lease.lease);
  table_->ReleaseRead(held.lease);
  EXPECT_EQ(table_->tenants().Get("a").used_bytes, 2 * kObject);
  EXPECT_EQ(Reserve(TenantKeys(20, 3, "a")).reserved, 3u);
}

TEST_F(ObjectTableTest, LoweringAQuotaEvictsAtOnceAndTrimsWhatWasLockedLater) {
  Store(TenantKeys(0, 6, "a"));
  const ReadAcquisition held = Read(TenantKeys(0, 2, "a"));  // the two newest, locked
  ASSERT_TRUE(table_->SetQuota("a", 1 * kObject).ok());
  // Four unlocked went at once; the locked two stay over the quota for now.
  EXPECT_EQ(table_->tenants().Get("a").used_bytes, 2 * kObject);
  EXPECT_EQ(table_->tenants().Excess("a"), kObject);
  EXPECT_EQ(table_->TrimOverQuota().objects, 0u);
  table_->ReleaseRead(held.lease);
  EXPECT_EQ(table_->TrimOverQuota().objects, 1u);
  EXPECT_EQ(table_->tenants().Get("a").used_bytes, kObject);
  EXPECT_TRUE(Resident(TenantKey(0, "a")));  // the head of the prompt stays
  EXPECT_TRUE(table_->RemoveQuota("a"));
  EXPECT_EQ(Reserve(TenantKeys(10, 4, "a")).reserved, 4u);
}

TEST_F(ObjectTableTest, QuotaModeOffChargesNothing) {
  config_.quota_mode = QuotaMode::kOff;
  Rebuild();
  EXPECT_EQ(table_->SetQuota("a", kObject).code(), ErrorCode::kWrongState);
  Store(TenantKeys(0, 3, "a"));
  EXPECT_EQ(table_->tenants().Get("a").used_bytes, 0u);
}

TEST_F(ObjectTableTest, AllowlistModeStoresNothingForATenantWithoutAQuota) {
  config_.quota_mode = QuotaMode::kAllowlist;
  Rebuild();
  const WriteLease refused = Reserve(TenantKeys(0, 2, "stranger"), kWriter,
                                     AllocationMode::kLongestPrefix);
  EXPECT_EQ(refused.reserved, 0u);
  EXPECT_EQ(refused.over_quota, 2u);
  ASSERT_TRUE(table_->SetQuota("stranger", 2 * kObject).ok());
  EXPECT_EQ(Reserve(TenantKeys(0, 2, "stranger")).reserved, 2u);
}

// Every staged and resident byte is charged to its tenant and nothing else,
// through every way a copy comes and goes (admitted, discarded as a
// duplicate, aborted, expired, reclaimed, deleted, retired, evicted, released
// with its owner), and no tenant passes its quota.
TEST_F(ObjectTableTest, TenantUsageMatchesTheTableThroughRandomOperations) {
  const std::string salts[] = {"a", "b", ""};
  ASSERT_TRUE(table_->SetQuota("a", 3 * kObject).ok());
  ASSERT_TRUE(table_->SetQuota("b", 5 * kObject).ok());
  constexpr std::uint64_t kKeys = 8;  // per tenant; the 16 MiB pool holds fewer of all
  std::mt19937_64 rng(44);
  std::vector<LeaseId> reads;
  std::vector<LeaseId> writes;
  const Owner writers[] = {kWriter, kOtherWriter};
  for (int step = 0; step < 4000; ++step) {
    const std::string& salt = salts[rng() % 3];
    const ObjectKey key = TenantKey(rng() % kKeys, salt);
    switch (rng() % 10) {
      case 0:
      case 1: {
        auto r = table_->ReserveWrite(TenantKeys(rng() % kKeys, 1 + rng() % 3, salt), kObject,
                                      writers[rng() % 2], AllocationMode::kLongestPrefix);
        ASSERT_TRUE(r.ok());
        if (r->lease != kNoLease) writes.push_back(r->lease);
        break;
      }
      case 2:
        if (!writes.empty()) {
          const std::size_t i = rng() % writes.size();
          if (rng() % 4 == 0) {
            table_->AbortWrite(writes[i]);
          } else {
            table_->FinishWrite(writes[i]);
          }
          writes.erase(writes.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 3: {
        ReadRequest request;
        const std::vector<ObjectKey> keys{key};
        request.keys = keys;
        request.owner = kReader;
        auto r = table_->AcquireRead(request);
        if (r.ok() && r->granted > 0) reads.push_back(r->lease);
        break;
      }
      case 4:
        if (!reads.empty()) {
          const std::size_t i = rng() % reads.size();
          table_->ReleaseRead(reads[i]);
          reads.erase(reads.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 5: table_->Delete(std::vector<ObjectKey>{key}, /*force=*/rng() % 2 == 0); break;
      case 6: table_->EvictLru(kObject * (1 + rng() % 3)); break;
      case 7:
        clock_.Advance(rng() % 8 == 0 ? config_.write_ttl_ms + 1 : 1000);
        table_->ReclaimExpired();
        break;
      case 8:
        if (rng() % 8 == 0) table_->ReleaseOwner(writers[rng() % 2]);
        break;
      case 9:
        if (rng() % 16 == 0) {
          ASSERT_TRUE(table_->SetQuota("b", (2 + rng() % 4) * kObject).ok());
        }
        table_->TrimOverQuota();
        break;
    }
    const TableStats stats = table_->Stats();
    const TenantTotals totals = table_->tenants().Totals();
    std::uint64_t charged = totals.other_used_bytes;
    for (const TenantAccount& t : totals.with_quota) charged += t.used_bytes;
    ASSERT_EQ(charged, stats.resident_bytes + stats.staging_bytes) << "step " << step;
    ASSERT_LE(table_->tenants().Get("a").used_bytes, 3 * kObject) << "step " << step;
  }
  for (const LeaseId lease : writes) table_->AbortWrite(lease);
  for (const LeaseId lease : reads) table_->ReleaseRead(lease);
  table_->Clear(/*force=*/true);
  table_->ReleaseOwner(kWriter);
  table_->ReleaseOwner(kOtherWriter);
  for (const std::string& salt : salts) EXPECT_EQ(table_->tenants().Get(salt).used_bytes, 0u);
}

// --- listing ------------------------------------------------------------------------------

// Pages walk every resident object once, in a fixed order; objects stored
// and deleted between pages never make one that stayed be skipped or repeated.
TEST_F(ObjectTableTest, PagesListEveryObjectThatStaysExactlyOnceWhileOthersComeAndGo) {
  Store(KeysN(0, 8));
  Store(TenantKeys(100, 2, "t"));
  std::map<std::uint64_t, int> seen;
  const ObjectKey* after = nullptr;
  std::vector<ListedObject> page;
  std::uint64_t next_new = 200;
  for (int pages = 0; pages < 100; ++pages) {
    page = table_->ListResident(after, 3, nullptr);
    if (page.empty()) break;
    for (const ListedObject& o : page) {
      std::uint64_t n = 0;
      for (int i = 0; i < 8; ++i) n |= std::uint64_t{o.key.chunk_hash[i]} << (8 * i);
      seen[n] += 1;
      EXPECT_EQ(o.size_bytes, kObject);
    }
    after = &page.back().key;
    // Between pages: one new object, and one of the listed ones deleted.
    Store(KeysN(next_new++, 1));
    table_->Delete(std::vector<ObjectKey>{page.front().key}, /*force=*/false);
  }
  for (std::uint64_t n = 0; n < 8; ++n) EXPECT_EQ(seen[n], 1) << n;
  EXPECT_EQ(seen[100], 1);
  EXPECT_EQ(seen[101], 1);
  for (const auto& [n, times] : seen) EXPECT_EQ(times, 1) << n;  // new ones: at most once
}

TEST_F(ObjectTableTest, AListingKeepsWhatItsFilterAcceptsAndSkipsStagedObjects) {
  Store(TenantKeys(0, 3, "a"));
  Store(TenantKeys(10, 2, "b"));
  const WriteLease staged = Reserve(TenantKeys(20, 2, "a"));
  ASSERT_EQ(staged.reserved, 2u);
  const auto only_a = table_->ListResident(
      nullptr, 100, [](const ObjectKey& key) { return key.cache_salt == "a"; });
  EXPECT_EQ(only_a.size(), 3u);
  for (const ListedObject& o : only_a) EXPECT_EQ(o.key.cache_salt, "a");
  EXPECT_EQ(table_->ListResident(nullptr, 100, nullptr).size(), 5u);
  EXPECT_TRUE(table_->ListResident(nullptr, 0, nullptr).empty());
  table_->AbortWrite(staged.lease);
}

// --- pins ---------------------------------------------------------------------------------

// A pinned object survives every eviction (the watermark's, a store's on
// demand, its tenant's quota) until its last pin goes; a delete still takes it.
TEST_F(ObjectTableTest, PinnedObjectsSurviveEveryEvictionUntilUnpinnedButNotADelete) {
  Store(KeysN(0, 4));
  ASSERT_EQ(table_->Pin(KeysN(0, 2)), (std::vector<PinOutcome>(2, PinOutcome::kPinned)));
  ASSERT_EQ(table_->Pin(KeysN(0, 1)), std::vector<PinOutcome>{PinOutcome::kPinned});  // twice
  EXPECT_EQ(table_->Stats().pinned_objects, 2u);
  EXPECT_EQ(table_->Stats().pinned_bytes, 2 * kObject);
  EXPECT_EQ(table_->EvictLru(16 * kObject).objects, 2u);  // only the unpinned two
  EXPECT_TRUE(Resident(KeyN(0)));
  EXPECT_TRUE(Resident(KeyN(1)));
  // A store that needs the rest of the pool evicts around them, on demand.
  Store(KeysN(50, 10));
  const std::uint64_t evictions_before = table_->Stats().on_demand_evictions;
  const WriteLease big = Reserve(KeysN(100, 14), kWriter, AllocationMode::kLongestPrefix);
  EXPECT_EQ(big.reserved, 14u);
  EXPECT_GT(table_->Stats().on_demand_evictions, evictions_before);
  table_->AbortWrite(big.lease);
  EXPECT_TRUE(Resident(KeyN(0)));
  // The tenant's quota cannot evict them either.
  ASSERT_TRUE(table_->SetQuota("", 2 * kObject).ok());
  EXPECT_EQ(Reserve(KeysN(200, 1), kWriter, AllocationMode::kLongestPrefix).over_quota, 1u);
  ASSERT_TRUE(table_->RemoveQuota(""));
  // Pinned objects are out of the eviction order (no eviction steps over them).
  EXPECT_EQ(lru_.Candidates(0, 100).size(), 0u);
  // Pins are counted: the first unpin of key 0 leaves one.
  EXPECT_EQ(table_->Unpin(KeysN(0, 2)), (std::vector<UnpinOutcome>(2, UnpinOutcome::kUnpinned)));
  EXPECT_EQ(table_->Stats().pinned_objects, 1u);
  EXPECT_EQ(lru_.Candidates(0, 100), std::vector<ObjectKey>{KeyN(1)});  // back, as the newest
  EXPECT_EQ(table_->EvictLru(16 * kObject).objects, 1u);  // key 1
  EXPECT_TRUE(Resident(KeyN(0)));
  // A delete takes a pinned object, pins and all.
  EXPECT_EQ(table_->Delete(KeysN(0, 1), /*force=*/false)[0], DeleteOutcome::kDeleted);
  EXPECT_EQ(table_->Stats().pinned_objects, 0u);
  EXPECT_EQ(table_->Stats().pinned_bytes, 0u);
  EXPECT_EQ(table_->Unpin(KeysN(0, 1))[0], UnpinOutcome::kNotPinned);
}

TEST_F(ObjectTableTest, FirstPinsBeyondTheBoundAreRefusedAndAbsentKeysAreNotPinned) {
  Store(KeysN(0, 10));  // the 16 MiB pool's bound: 8 MiB of pins
  const std::vector<PinOutcome> outcomes = table_->Pin(KeysN(0, 10));
  EXPECT_EQ(std::count(outcomes.begin(), outcomes.end(), PinOutcome::kPinned), 8);
  EXPECT_EQ(std::count(outcomes.begin(), outcomes.end(), PinOutcome::kOverLimit), 2);
  EXPECT_EQ(table_->Stats().pinned_bytes, 8 * kObject);
  EXPECT_EQ(table_->pinned_limit_bytes(), 8 * kObject);
  // Another pin of a pinned object takes no more bytes: allowed at the bound.
  EXPECT_EQ(table_->Pin(KeysN(0, 1))[0], PinOutcome::kPinned);
  EXPECT_EQ(table_->Pin(KeysN(50, 1))[0], PinOutcome::kNotResident);
  const WriteLease staged = Reserve(KeysN(60, 1));
  EXPECT_EQ(table_->Pin(KeysN(60, 1))[0], PinOutcome::kNotResident);
  table_->AbortWrite(staged.lease);
  EXPECT_EQ(table_->ListResident(nullptr, 100, nullptr, /*pinned_only=*/true).size(), 8u);
  table_->Clear(/*force=*/false);
  EXPECT_EQ(table_->Stats().pinned_bytes, 0u);
  EXPECT_EQ(table_->Stats().resident_objects, 0u);
}

}  // namespace
}  // namespace lmcache::store
