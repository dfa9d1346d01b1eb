#include "store/object_table.h"

#include <gtest/gtest.h>

#include "fakes/aligned_buffer.h"
#include "fakes/fake_clock.h"
#include "fakes/keys.h"

namespace lmcache::store {
namespace {

using testing::KeyN;
using testing::KeysN;

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kObject = 1 * kMiB;
constexpr OwnerId kWriter = 1;
constexpr OwnerId kOtherWriter = 2;
constexpr OwnerId kReader = 3;

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
  // Stages and admits `keys` for kWriter.
  void Store(const std::vector<ObjectKey>& keys) {
    auto r = table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kAllOrNothing);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->reserved, keys.size());
    for (auto outcome : table_->FinishWrite(keys, kWriter)) {
      ASSERT_EQ(outcome, WriteOutcome::kAdmitted);
    }
  }
  bool Resident(const ObjectKey& key) {
    auto info = table_->Find(key);
    return info && info->state == ObjectState::kResident;
  }

  testing::AlignedBuffer buffer_;
  std::unique_ptr<alloc::SlabAllocator> allocator_;
  testing::FakeClock clock_;
  LruPolicy lru_;
  ObjectTableConfig config_;
  std::unique_ptr<ObjectTable> table_;
};

TEST_F(ObjectTableTest, StagedObjectIsInvisibleToReadersUntilFinished) {
  const auto keys = KeysN(0, 3);
  auto r = table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kAllOrNothing);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reserved, 3u);
  auto grants = table_->ReserveRead(keys, 1, kReader, ReadMode::kEach);
  ASSERT_TRUE(grants.ok());
  for (const auto& g : *grants) EXPECT_FALSE(g.granted);
  EXPECT_EQ(table_->Stats().staging_objects, 3u);
  EXPECT_EQ(table_->Stats().staging_bytes, 3 * kObject);

  table_->FinishWrite(keys, kWriter);
  grants = table_->ReserveRead(keys, 1, kReader, ReadMode::kAllOrNothing);
  ASSERT_TRUE(grants.ok());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE((*grants)[i].granted);
    EXPECT_EQ((*grants)[i].offset, r->offsets[i]);
    EXPECT_EQ((*grants)[i].size, kObject);
  }
  const TableStats stats = table_->Stats();
  EXPECT_EQ(stats.resident_objects, 3u);
  EXPECT_EQ(stats.staging_objects, 0u);
  EXPECT_EQ(stats.locked_objects, 3u);
  EXPECT_EQ(stats.locked_bytes, 3 * kObject);
}

TEST_F(ObjectTableTest, ReserveSkipsResidentKeys) {
  Store(KeysN(0, 2));
  auto r = table_->ReserveWrite(KeysN(0, 3), kObject, kWriter, AllocationMode::kAllOrNothing);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcomes[0], WriteReservation::kAlreadyResident);
  EXPECT_EQ(r->outcomes[1], WriteReservation::kAlreadyResident);
  EXPECT_EQ(r->outcomes[2], WriteReservation::kReserved);
  EXPECT_EQ(r->reserved, 1u);
}

TEST_F(ObjectTableTest, RepeatedReservationBySameWriterReturnsSameBuffer) {
  const auto keys = KeysN(0, 2);
  auto first = table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kAllOrNothing);
  auto second = table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kAllOrNothing);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->offsets, second->offsets);
  EXPECT_EQ(allocator_->UsedBytes(), 2 * kObject);  // nothing leaked
}

TEST_F(ObjectTableTest, FirstWriterWinsAndDuplicateIsDiscarded) {
  const auto keys = KeysN(0, 1);
  ASSERT_TRUE(table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kAllOrNothing).ok());
  ASSERT_TRUE(
      table_->ReserveWrite(keys, kObject, kOtherWriter, AllocationMode::kAllOrNothing).ok());
  EXPECT_EQ(allocator_->UsedBytes(), 2 * kObject);
  EXPECT_EQ(table_->FinishWrite(keys, kOtherWriter)[0], WriteOutcome::kAdmitted);
  EXPECT_EQ(table_->FinishWrite(keys, kWriter)[0], WriteOutcome::kDuplicateDiscarded);
  EXPECT_EQ(allocator_->UsedBytes(), kObject);
  EXPECT_EQ(table_->FinishWrite(keys, kWriter)[0], WriteOutcome::kNotStaged);
}

TEST_F(ObjectTableTest, AbortWriteFreesTheBuffer) {
  const auto keys = KeysN(0, 2);
  ASSERT_TRUE(table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kAllOrNothing).ok());
  EXPECT_EQ(table_->AbortWrite(keys, kOtherWriter), 0u);
  EXPECT_EQ(table_->AbortWrite(keys, kWriter), 2u);
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
  EXPECT_FALSE(table_->Find(keys[0]));
}

TEST_F(ObjectTableTest, ExpiredWriteLeaseIsNotAdmittedAndIsReclaimed) {
  const auto keys = KeysN(0, 2);
  ASSERT_TRUE(table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kAllOrNothing).ok());
  clock_.Advance(config_.write_ttl_ms);
  EXPECT_EQ(table_->FinishWrite(std::vector{keys[0]}, kWriter)[0], WriteOutcome::kLeaseExpired);
  EXPECT_EQ(table_->ReclaimExpired(), 1u);  // the other one
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
  EXPECT_EQ(table_->Stats().expired_writes_reclaimed, 1u);
}

TEST_F(ObjectTableTest, ReadModes) {
  Store({KeyN(0), KeyN(1), KeyN(3)});
  const auto keys = KeysN(0, 4);  // 2 is missing
  auto each = table_->ReserveRead(keys, 1, kReader, ReadMode::kEach);
  auto prefix = table_->ReserveRead(keys, 1, kReader, ReadMode::kPrefix);
  auto all = table_->ReserveRead(keys, 1, kReader, ReadMode::kAllOrNothing);
  ASSERT_TRUE(each.ok() && prefix.ok() && all.ok());
  EXPECT_EQ(((*each)[0].granted + (*each)[1].granted + (*each)[2].granted + (*each)[3].granted), 3);
  EXPECT_TRUE((*prefix)[0].granted && (*prefix)[1].granted);
  EXPECT_FALSE((*prefix)[2].granted || (*prefix)[3].granted);
  for (const auto& g : *all) EXPECT_FALSE(g.granted);
  EXPECT_EQ(table_->Find(KeyN(0))->read_locks, 2u);  // each + prefix; all-or-nothing took none
  EXPECT_EQ(table_->Find(KeyN(3))->read_locks, 1u);
}

TEST_F(ObjectTableTest, ReadCountsAreBoundedAndBalanced) {
  Store(KeysN(0, 2));
  const auto keys = KeysN(0, 2);
  EXPECT_EQ(table_->ReserveRead(keys, 0, kReader, ReadMode::kEach).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(table_->ReserveRead(keys, 129, kReader, ReadMode::kEach).status().code(),
            ErrorCode::kInvalidArgument);
  ASSERT_TRUE(table_->ReserveRead(keys, 4, kReader, ReadMode::kEach).ok());
  for (int reader = 0; reader < 4; ++reader) {
    auto released = table_->FinishRead(keys, 1, 100 + reader);  // other owners hand over
    ASSERT_TRUE(released.ok());
    EXPECT_EQ((*released)[0], ReleaseOutcome::kReleased);
  }
  EXPECT_EQ(table_->Find(keys[0])->read_locks, 0u);
  EXPECT_EQ((*table_->FinishRead(keys, 1, kReader))[0], ReleaseOutcome::kNotLocked);
  EXPECT_EQ((*table_->FinishRead(KeysN(9, 1), 1, kReader))[0], ReleaseOutcome::kNotFound);
  EXPECT_EQ(table_->Stats().locked_objects, 0u);
}

TEST_F(ObjectTableTest, DeleteRefusesLockedUnlessForced) {
  Store(KeysN(0, 2));
  ASSERT_TRUE(table_->ReserveRead(KeysN(0, 1), 1, kReader, ReadMode::kEach).ok());
  auto outcomes = table_->Delete(KeysN(0, 3), /*force=*/false);
  EXPECT_EQ(outcomes[0], DeleteOutcome::kLocked);
  EXPECT_EQ(outcomes[1], DeleteOutcome::kDeleted);
  EXPECT_EQ(outcomes[2], DeleteOutcome::kNotFound);
  EXPECT_TRUE(Resident(KeyN(0)));
  EXPECT_EQ(lru_.size(), 1u);
}

TEST_F(ObjectTableTest, ForcedDeleteOfLockedObjectKeepsMemoryUntilReadFinishes) {
  Store(KeysN(0, 1));
  auto grant = table_->ReserveRead(KeysN(0, 1), 1, kReader, ReadMode::kEach);
  ASSERT_TRUE(grant.ok());
  const Offset reading = (*grant)[0].offset;
  EXPECT_EQ(table_->Delete(KeysN(0, 1), /*force=*/true)[0], DeleteOutcome::kDeleted);
  EXPECT_FALSE(table_->Find(KeyN(0)));
  EXPECT_EQ(table_->Stats().retired_objects, 1u);
  // The reader is still copying out of `reading`: a new object must not get it.
  auto other = table_->ReserveWrite(KeysN(5, 1), kObject, kWriter, AllocationMode::kAllOrNothing);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->offsets[0], reading);
  EXPECT_EQ((*table_->FinishRead(KeysN(0, 1), 1, kReader))[0], ReleaseOutcome::kReleased);
  EXPECT_EQ(table_->Stats().retired_objects, 0u);
  EXPECT_EQ(allocator_->UsedBytes(), kObject);  // only the new staging copy
}

TEST_F(ObjectTableTest, ForcedDeleteOfStagingIsFreedWhenWriterFinishes) {
  const auto keys = KeysN(0, 1);
  ASSERT_TRUE(table_->ReserveWrite(keys, kObject, kWriter, AllocationMode::kAllOrNothing).ok());
  EXPECT_EQ(table_->Delete(keys, /*force=*/false)[0], DeleteOutcome::kLocked);
  EXPECT_EQ(table_->Delete(keys, /*force=*/true)[0], DeleteOutcome::kDeleted);
  EXPECT_EQ(allocator_->UsedBytes(), kObject);  // the writer may still be copying in
  EXPECT_EQ(table_->FinishWrite(keys, kWriter)[0], WriteOutcome::kNotStaged);
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
  EXPECT_FALSE(table_->Find(keys[0]));
}

TEST_F(ObjectTableTest, ClearHonoursLocksUnlessForced) {
  Store(KeysN(0, 4));
  ASSERT_TRUE(table_->ReserveRead(KeysN(0, 1), 1, kReader, ReadMode::kEach).ok());
  EXPECT_EQ(table_->Clear(/*force=*/false), 3u);
  EXPECT_TRUE(Resident(KeyN(0)));
  EXPECT_EQ(table_->Clear(/*force=*/true), 1u);
  EXPECT_EQ(table_->Stats().resident_objects, 0u);
  clock_.Advance(config_.read_ttl_ms);  // the reader never came back
  EXPECT_EQ(table_->ReclaimExpired(), 1u);
  EXPECT_EQ(allocator_->UsedBytes(), 0u);
}

TEST_F(ObjectTableTest, ReleaseOwnerDropsItsReadsAndWrites) {
  Store(KeysN(0, 2));
  ASSERT_TRUE(table_->ReserveRead(KeysN(0, 2), 3, kReader, ReadMode::kEach).ok());
  ASSERT_TRUE(table_->ReserveRead(KeysN(0, 1), 1, kOtherWriter, ReadMode::kEach).ok());
  ASSERT_TRUE(
      table_->ReserveWrite(KeysN(10, 2), kObject, kReader, AllocationMode::kAllOrNothing).ok());
  const OwnerReleaseReport report = table_->ReleaseOwner(kReader);
  EXPECT_EQ(report.read_locks_released, 6u);
  EXPECT_EQ(report.writes_aborted, 2u);
  EXPECT_EQ(table_->Find(KeyN(0))->read_locks, 1u);  // kOtherWriter's stays
  EXPECT_EQ(table_->Find(KeyN(1))->read_locks, 0u);
  EXPECT_FALSE(table_->Find(KeyN(10)));
  EXPECT_EQ(allocator_->UsedBytes(), 2 * kObject);
}

TEST_F(ObjectTableTest, ExpiredReadLeaseStillReadableButEvictable) {
  Store(KeysN(0, 1));
  ASSERT_TRUE(table_->ReserveRead(KeysN(0, 1), 1, kReader, ReadMode::kEach).ok());
  EXPECT_EQ(table_->EvictLru(kObject).objects, 0u);  // locked
  clock_.Advance(config_.read_ttl_ms);
  auto again = table_->ReserveRead(KeysN(0, 1), 1, kReader, ReadMode::kEach);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)[0].granted);  // still resident: reading it is fine
  ASSERT_TRUE(table_->FinishRead(KeysN(0, 1), 1, kReader).ok());
  EXPECT_EQ(table_->EvictLru(kObject).objects, 1u);
}

TEST_F(ObjectTableTest, EvictLruTakesOldestUnlockedTailFirst) {
  Store(KeysN(0, 4));   // prompt A: chunks 0..3
  Store(KeysN(10, 2));  // prompt B, newer
  ASSERT_TRUE(table_->ReserveRead(std::vector{KeyN(3)}, 1, kReader, ReadMode::kEach).ok());
  const EvictionReport report = table_->EvictLru(2 * kObject);
  EXPECT_EQ(report.objects, 2u);
  EXPECT_EQ(report.bytes, 2 * kObject);
  EXPECT_TRUE(Resident(KeyN(3)));   // locked: skipped
  EXPECT_FALSE(Resident(KeyN(2)));  // the tail of A went first
  EXPECT_FALSE(Resident(KeyN(1)));
  EXPECT_TRUE(Resident(KeyN(0)));  // A's head stays
  EXPECT_TRUE(Resident(KeyN(10)));
  EXPECT_EQ(table_->Stats().evicted_objects, 2u);
}

TEST_F(ObjectTableTest, OnDemandEvictionMakesRoomForAStore) {
  Store(KeysN(0, 16));  // the 16 MiB pool is full
  auto r = table_->ReserveWrite(KeysN(100, 4), kObject, kWriter, AllocationMode::kAllOrNothing);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reserved, 4u);
  EXPECT_EQ(table_->Stats().on_demand_evictions, 1u);
  EXPECT_EQ(table_->Stats().resident_objects, 12u);
  EXPECT_TRUE(Resident(KeyN(0)));  // heads survive
}

TEST_F(ObjectTableTest, WithoutOnDemandEvictionAllOrNothingFailsWhole) {
  config_.on_demand_eviction = false;
  Rebuild();
  Store(KeysN(0, 14));
  auto r = table_->ReserveWrite(KeysN(100, 4), kObject, kWriter, AllocationMode::kAllOrNothing);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reserved, 0u);
  EXPECT_EQ(r->out_of_memory, 4u);
  EXPECT_EQ(allocator_->UsedBytes(), 14 * kObject);
  auto prefix =
      table_->ReserveWrite(KeysN(100, 4), kObject, kWriter, AllocationMode::kLongestPrefix);
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(prefix->reserved, 2u);
  EXPECT_EQ(prefix->outcomes[0], WriteReservation::kReserved);
  EXPECT_EQ(prefix->outcomes[1], WriteReservation::kReserved);
  EXPECT_EQ(prefix->outcomes[2], WriteReservation::kOutOfMemory);
}

TEST_F(ObjectTableTest, LockedObjectsAreNeverEvictedOnDemand) {
  Store(KeysN(0, 16));
  ASSERT_TRUE(table_->ReserveRead(KeysN(0, 16), 1, kReader, ReadMode::kEach).ok());
  auto r = table_->ReserveWrite(KeysN(100, 1), kObject, kWriter, AllocationMode::kAllOrNothing);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out_of_memory, 1u);
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

TEST_F(ObjectTableTest, TouchReordersEviction) {
  Store(KeysN(0, 1));
  Store(KeysN(1, 1));
  table_->Touch(KeysN(0, 1));
  EXPECT_EQ(table_->EvictLru(1).objects, 1u);
  EXPECT_TRUE(Resident(KeyN(0)));
  EXPECT_FALSE(Resident(KeyN(1)));
}

}  // namespace
}  // namespace lmcache::store
