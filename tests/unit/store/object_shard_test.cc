// ObjectShard alone: each transition of one key, legal and illegal, and the
// offsets each hands back to be freed. The shard never reads or writes the
// pool, so slots here are plain offsets; the allocator only sizes them.
#include "store/object_shard.h"

#include <gtest/gtest.h>

#include "fakes/aligned_buffer.h"
#include "fakes/keys.h"
#include "store/object_table.h"

namespace lmcache::store {
namespace {

using testing::KeyN;

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kSize = kMiB;
constexpr TimeMs kTtl = 1000;
const Owner kWorker = Owner::Instance(1);
const Owner kOtherWorker = Owner::Instance(2);
const Owner kLoader = Owner::Internal(3);
const Owner kReader = Owner::Session(4);
constexpr LeaseId kLease = 11;
constexpr LeaseId kOtherLease = 12;
constexpr LeaseId kReadLease = 21;
constexpr LeaseId kOtherReadLease = 22;

class ObjectShardTest : public ::testing::Test {
 protected:
  ObjectShardTest() : buffer_(8 * kMiB) {
    allocator_ = std::move(alloc::SlabAllocator::Create(buffer_.span(), {})).value();
    context_.allocator = allocator_.get();
    shard_ = std::make_unique<ObjectShard>(&context_);
  }
  // Every test runs with the shard's mutex held, as the table calls it.
  void SetUp() override LMC_NO_THREAD_SAFETY_ANALYSIS { shard_->Lock(); }
  void TearDown() override LMC_NO_THREAD_SAFETY_ANALYSIS { shard_->Unlock(); }

  // Stages `key` for `owner` under `lease` at `slot`.
  ReserveStep Stage(const ObjectKey& key, Offset slot, const Owner& owner = kWorker,
                    LeaseId lease = kLease,
                    std::uint64_t size = kSize) LMC_NO_THREAD_SAFETY_ANALYSIS {
    return shard_->ReserveLocked(key, owner, size, lease, now_ + kTtl, slot, &freed_);
  }
  // Stages and admits `key` at `slot`.
  ResidentEntry* Admit(const ObjectKey& key, Offset slot) LMC_NO_THREAD_SAFETY_ANALYSIS {
    Stage(key, slot);
    return shard_->AdmitLocked(key, kLease, now_, &freed_).resident;
  }
  std::optional<ObjectInfo> Info(const ObjectKey& key) LMC_NO_THREAD_SAFETY_ANALYSIS {
    return shard_->FindLocked(key, now_);
  }
  TableStats Stats() LMC_NO_THREAD_SAFETY_ANALYSIS {
    TableStats stats;
    shard_->AddStatsLocked(now_, &stats);
    return stats;
  }

  testing::AlignedBuffer buffer_;
  std::unique_ptr<alloc::SlabAllocator> allocator_;
  ShardContext context_;
  std::unique_ptr<ObjectShard> shard_;
  TimeMs now_ = 5000;
  std::vector<Offset> freed_;
};

// --- reserve ------------------------------------------------------------------------------

TEST_F(ObjectShardTest, AReservationWithoutASlotAsksForMemoryAndStagesNothing) {
  shard_->AssertHeld();
  const ReserveStep step =
      shard_->ReserveLocked(KeyN(0), kWorker, kSize, kLease, now_ + kTtl, std::nullopt, &freed_);
  EXPECT_EQ(step.state, ReserveState::kNeedsMemory);
  EXPECT_FALSE(Info(KeyN(0)));
  EXPECT_TRUE(freed_.empty());
}

TEST_F(ObjectShardTest, AnOfferedSlotIsStagedInvisibleToReaders) {
  shard_->AssertHeld();
  const ReserveStep step = Stage(KeyN(0), 4 * kMiB);
  EXPECT_EQ(step.state, ReserveState::kReserved);
  EXPECT_EQ(step.offset, 4 * kMiB);
  ASSERT_TRUE(Info(KeyN(0)));
  EXPECT_EQ(Info(KeyN(0))->state, ObjectState::kStaging);
  EXPECT_EQ(shard_->FindResidentLocked(KeyN(0)), nullptr);
}

TEST_F(ObjectShardTest, StagingAResidentKeyIsRefusedAndItsOfferedSlotFreed) {
  Admit(KeyN(0), 0);
  EXPECT_EQ(Stage(KeyN(0), 2 * kMiB, kOtherWorker, kOtherLease).state, ReserveState::kResident);
  EXPECT_EQ(freed_, std::vector<Offset>{2 * kMiB});
  EXPECT_EQ(Info(KeyN(0))->offset, 0u);
}

TEST_F(ObjectShardTest, ARepeatedReservationOfOneSizeMovesTheCopyToTheNewLease) {
  shard_->AssertHeld();
  Stage(KeyN(0), kMiB);
  const ReserveStep again = Stage(KeyN(0), 3 * kMiB, kWorker, kOtherLease);
  EXPECT_EQ(again.state, ReserveState::kReserved);
  EXPECT_EQ(again.offset, kMiB);  // the first buffer back
  EXPECT_EQ(freed_, std::vector<Offset>{3 * kMiB});
  // The old lease no longer owns it: it cannot admit it.
  EXPECT_EQ(shard_->AdmitLocked(KeyN(0), kLease, now_, &freed_).outcome, WriteOutcome::kNotStaged);
  EXPECT_EQ(shard_->AdmitLocked(KeyN(0), kOtherLease, now_, &freed_).outcome,
            WriteOutcome::kAdmitted);
}

TEST_F(ObjectShardTest, ARepeatedReservationOfAnotherSizeStartsOver) {
  Stage(KeyN(0), kMiB);
  const ReserveStep again = Stage(KeyN(0), 3 * kMiB, kWorker, kOtherLease, 2 * kSize);
  EXPECT_EQ(again.state, ReserveState::kReserved);
  EXPECT_EQ(again.offset, 3 * kMiB);
  EXPECT_EQ(freed_, std::vector<Offset>{kMiB});
  EXPECT_EQ(Stats().staging_objects, 1u);
}

TEST_F(ObjectShardTest, TwoWritersStageOneKeyAndTheFirstToFinishWins) {
  shard_->AssertHeld();
  Stage(KeyN(0), 0, kWorker, kLease);
  Stage(KeyN(0), kMiB, kOtherWorker, kOtherLease);
  EXPECT_EQ(Stats().staging_objects, 2u);
  EXPECT_EQ(shard_->AdmitLocked(KeyN(0), kOtherLease, now_, &freed_).outcome,
            WriteOutcome::kAdmitted);
  const AdmitStep late = shard_->AdmitLocked(KeyN(0), kLease, now_, &freed_);
  EXPECT_EQ(late.outcome, WriteOutcome::kDuplicateDiscarded);
  ASSERT_NE(late.resident, nullptr);
  EXPECT_EQ(late.resident->offset, kMiB);
  EXPECT_EQ(freed_, std::vector<Offset>{0});
}

// --- admit and abort ----------------------------------------------------------------------

TEST_F(ObjectShardTest, AdmissionMakesTheCopyResidentWithItsSlotBytes) {
  shard_->AssertHeld();
  Stage(KeyN(0), 0);
  const AdmitStep step = shard_->AdmitLocked(KeyN(0), kLease, now_, &freed_);
  EXPECT_EQ(step.outcome, WriteOutcome::kAdmitted);
  EXPECT_EQ(step.aligned_bytes, allocator_->AlignedSize(kSize));
  ASSERT_NE(step.resident, nullptr);
  EXPECT_EQ(Info(KeyN(0))->state, ObjectState::kResident);
  EXPECT_EQ(Stats().resident_bytes, allocator_->AlignedSize(kSize));
  EXPECT_TRUE(freed_.empty());
}

TEST_F(ObjectShardTest, AdmittingAfterTheWriteLeaseEndedFreesTheCopy) {
  shard_->AssertHeld();
  Stage(KeyN(0), kMiB);
  const AdmitStep step = shard_->AdmitLocked(KeyN(0), kLease, now_ + kTtl, &freed_);
  EXPECT_EQ(step.outcome, WriteOutcome::kLeaseExpired);
  EXPECT_FALSE(Info(KeyN(0)));
  EXPECT_EQ(freed_, std::vector<Offset>{kMiB});
}

TEST_F(ObjectShardTest, AdmittingWhatTheLeaseNeverStagedChangesNothing) {
  shard_->AssertHeld();
  Stage(KeyN(0), 0);
  EXPECT_EQ(shard_->AdmitLocked(KeyN(0), kOtherLease, now_, &freed_).outcome,
            WriteOutcome::kNotStaged);
  EXPECT_EQ(shard_->AdmitLocked(KeyN(1), kLease, now_, &freed_).outcome, WriteOutcome::kNotStaged);
  EXPECT_EQ(Info(KeyN(0))->state, ObjectState::kStaging);
  EXPECT_TRUE(freed_.empty());
  // Admitted once, a second admission of the same lease finds nothing.
  EXPECT_EQ(shard_->AdmitLocked(KeyN(0), kLease, now_, &freed_).outcome, WriteOutcome::kAdmitted);
  EXPECT_EQ(shard_->AdmitLocked(KeyN(0), kLease, now_, &freed_).outcome, WriteOutcome::kNotStaged);
  EXPECT_TRUE(freed_.empty());
}

TEST_F(ObjectShardTest, AnAbortFreesOnlyItsOwnLeasesCopy) {
  shard_->AssertHeld();
  Stage(KeyN(0), 0);
  EXPECT_FALSE(shard_->AbortLocked(KeyN(0), kOtherLease, &freed_));
  EXPECT_FALSE(shard_->AbortLocked(KeyN(1), kLease, &freed_));
  EXPECT_TRUE(freed_.empty());
  EXPECT_TRUE(shard_->AbortLocked(KeyN(0), kLease, &freed_));
  EXPECT_EQ(freed_, std::vector<Offset>{0});
  EXPECT_FALSE(Info(KeyN(0)));
  EXPECT_FALSE(shard_->AbortLocked(KeyN(0), kLease, &freed_));  // twice: nothing more
}

// --- read locks ---------------------------------------------------------------------------

TEST_F(ObjectShardTest, AnUnlockReleasesOnlyItsOwnLeasesLocks) {
  shard_->AssertHeld();
  ResidentEntry* entry = Admit(KeyN(0), 0);
  shard_->LockReadLocked(entry, kReadLease, kReader, 2, {}, now_, kTtl);
  EXPECT_EQ(shard_->UnlockReadLocked(KeyN(0), kOtherReadLease, 5, now_, &freed_), 0u);
  EXPECT_EQ(shard_->UnlockReadLocked(KeyN(1), kReadLease, 5, now_, &freed_), 0u);
  EXPECT_EQ(Info(KeyN(0))->read_locks, 2u);
  EXPECT_EQ(shard_->UnlockReadLocked(KeyN(0), kReadLease, 5, now_, &freed_), 2u);
  EXPECT_EQ(Info(KeyN(0))->read_locks, 0u);
  EXPECT_TRUE(freed_.empty());  // a resident copy stays when unlocked
}

TEST_F(ObjectShardTest, ALockTakesOverOneLockOfALeaseItConsumes) {
  shard_->AssertHeld();
  ResidentEntry* entry = Admit(KeyN(0), 0);
  shard_->LockReadLocked(entry, kReadLease, kReader, 1, {}, now_, kTtl);
  const LeaseId consume[] = {kOtherLease, kReadLease};
  EXPECT_TRUE(shard_->LockReadLocked(entry, kOtherReadLease, kWorker, 2, consume, now_, kTtl));
  EXPECT_EQ(Info(KeyN(0))->read_locks, 2u);  // one moved, one fresh
  EXPECT_EQ(shard_->UnlockReadLocked(KeyN(0), kReadLease, 5, now_, &freed_), 0u);
  EXPECT_FALSE(shard_->LockReadLocked(entry, kLease, kWorker, 1, consume, now_, kTtl));
}

TEST_F(ObjectShardTest, LocksCountAsLockedUntilTheyExpire) {
  shard_->AssertHeld();
  ResidentEntry* entry = Admit(KeyN(0), 0);
  shard_->LockReadLocked(entry, kReadLease, kReader, 3, {}, now_, kTtl);
  EXPECT_EQ(Stats().locked_objects, 1u);
  EXPECT_EQ(Stats().read_locks, 3u);
  now_ += kTtl;
  EXPECT_EQ(Stats().locked_objects, 0u);
}

// --- delete and evict ---------------------------------------------------------------------

TEST_F(ObjectShardTest, DeletingAnUnlockedObjectFreesItAndAMissingOneIsNotFound) {
  shard_->AssertHeld();
  Admit(KeyN(0), kMiB);
  EXPECT_EQ(shard_->DeleteLocked(KeyN(1), false, now_, &freed_).outcome, DeleteOutcome::kNotFound);
  const DeleteStep step = shard_->DeleteLocked(KeyN(0), false, now_, &freed_);
  EXPECT_EQ(step.outcome, DeleteOutcome::kDeleted);
  EXPECT_TRUE(step.removed_resident);
  EXPECT_EQ(step.aligned_bytes, allocator_->AlignedSize(kSize));
  EXPECT_EQ(freed_, std::vector<Offset>{kMiB});
  EXPECT_EQ(Stats().resident_bytes, 0u);
}

TEST_F(ObjectShardTest, ALockedObjectIsLeftAloneUnlessForcedThenRetiredUntilItsLastUnlock) {
  shard_->AssertHeld();
  ResidentEntry* entry = Admit(KeyN(0), kMiB);
  shard_->LockReadLocked(entry, kReadLease, kReader, 2, {}, now_, kTtl);
  EXPECT_EQ(shard_->DeleteLocked(KeyN(0), false, now_, &freed_).outcome, DeleteOutcome::kLocked);
  EXPECT_EQ(Info(KeyN(0))->state, ObjectState::kResident);
  EXPECT_EQ(shard_->DeleteLocked(KeyN(0), true, now_, &freed_).outcome, DeleteOutcome::kDeleted);
  EXPECT_FALSE(Info(KeyN(0)));
  EXPECT_TRUE(freed_.empty());  // the reader may still copy out of it
  EXPECT_EQ(Stats().retired_objects, 1u);
  EXPECT_EQ(shard_->UnlockReadLocked(KeyN(0), kReadLease, 1, now_, &freed_), 1u);
  EXPECT_TRUE(freed_.empty());
  EXPECT_EQ(shard_->UnlockReadLocked(KeyN(0), kReadLease, 1, now_, &freed_), 1u);
  EXPECT_EQ(freed_, std::vector<Offset>{kMiB});
  EXPECT_EQ(Stats().retired_objects, 0u);
}

TEST_F(ObjectShardTest, AForcedDeleteAbandonsALiveStagedCopyUntilItsLeaseEnds) {
  shard_->AssertHeld();
  Stage(KeyN(0), 0, kWorker, kLease);
  Stage(KeyN(1), kMiB, kLoader, kOtherLease);
  EXPECT_EQ(shard_->DeleteLocked(KeyN(0), false, now_, &freed_).outcome, DeleteOutcome::kLocked);
  EXPECT_EQ(shard_->DeleteLocked(KeyN(0), true, now_, &freed_).outcome, DeleteOutcome::kDeleted);
  EXPECT_EQ(shard_->DeleteLocked(KeyN(1), true, now_, &freed_).outcome, DeleteOutcome::kDeleted);
  EXPECT_FALSE(Info(KeyN(0)));
  EXPECT_TRUE(freed_.empty());  // the writers may still copy into them
  EXPECT_EQ(Stats().retired_objects, 2u);
  // Its writer's finish frees it and admits nothing; an abort frees the other.
  EXPECT_EQ(shard_->AdmitLocked(KeyN(0), kLease, now_, &freed_).outcome, WriteOutcome::kNotStaged);
  EXPECT_EQ(freed_, std::vector<Offset>{0});
  EXPECT_FALSE(Info(KeyN(0)));
  EXPECT_TRUE(shard_->AbortLocked(KeyN(1), kOtherLease, &freed_));
  EXPECT_EQ(freed_, (std::vector<Offset>{0, kMiB}));
  EXPECT_EQ(Stats().retired_objects, 0u);
}

TEST_F(ObjectShardTest, ADeleteFreesExpiredStagedCopiesEvenUnforced) {
  shard_->AssertHeld();
  Stage(KeyN(0), 0);
  now_ += kTtl;
  EXPECT_EQ(shard_->DeleteLocked(KeyN(0), false, now_, &freed_).outcome, DeleteOutcome::kNotFound);
  EXPECT_EQ(freed_, std::vector<Offset>{0});
  EXPECT_FALSE(Info(KeyN(0)));
}

TEST_F(ObjectShardTest, EvictionTakesOnlyAnUnlockedResidentCopy) {
  shard_->AssertHeld();
  ResidentEntry* entry = Admit(KeyN(0), 0);
  Stage(KeyN(1), kMiB);
  shard_->LockReadLocked(entry, kReadLease, kReader, 1, {}, now_, kTtl);
  EXPECT_EQ(shard_->EvictLocked(KeyN(0), now_, &freed_).state, EvictState::kLocked);
  EXPECT_EQ(shard_->EvictLocked(KeyN(1), now_, &freed_).state, EvictState::kAbsent);  // staged
  EXPECT_EQ(shard_->EvictLocked(KeyN(2), now_, &freed_).state, EvictState::kAbsent);
  EXPECT_TRUE(freed_.empty());
  now_ += kTtl;  // the read lease ran out: the object is evictable, its lock never handed on
  const EvictStep step = shard_->EvictLocked(KeyN(0), now_, &freed_);
  EXPECT_EQ(step.state, EvictState::kEvicted);
  EXPECT_EQ(step.aligned_bytes, allocator_->AlignedSize(kSize));
  EXPECT_EQ(freed_, std::vector<Offset>{0});
  EXPECT_EQ(Stats().resident_objects, 0u);
}

// --- reclaim and quarantine ---------------------------------------------------------------

TEST_F(ObjectShardTest, AnExpiredWorkersCopyIsQuarantinedUntilThatWorkerIsReleased) {
  shard_->AssertHeld();
  Stage(KeyN(0), 0, kWorker, kLease);
  Stage(KeyN(1), kMiB, kLoader, kOtherLease);
  EXPECT_EQ(shard_->ReclaimLocked(now_, &freed_).expired_writes, 0u);
  now_ += kTtl;
  const ReclaimStep step = shard_->ReclaimLocked(now_, &freed_);
  EXPECT_EQ(step.expired_writes, 2u);
  EXPECT_EQ(step.quarantined, 1u);
  EXPECT_EQ(freed_, std::vector<Offset>{kMiB});  // the server's own writer ended: freed
  EXPECT_EQ(Stats().quarantined_objects, 1u);
  // Never by time, never for another owner, never by its old lease.
  now_ += 100 * kTtl;
  shard_->ReclaimLocked(now_, &freed_);
  EXPECT_EQ(shard_->ReleaseQuarantinedLocked(kOtherWorker, &freed_), 0u);
  EXPECT_FALSE(shard_->AbortLocked(KeyN(0), kLease, &freed_));
  EXPECT_EQ(freed_, std::vector<Offset>{kMiB});
  EXPECT_EQ(shard_->ReleaseQuarantinedLocked(kWorker, &freed_), 1u);
  EXPECT_EQ(freed_, (std::vector<Offset>{kMiB, 0}));
  EXPECT_EQ(Stats().quarantined_objects, 0u);
}

TEST_F(ObjectShardTest, AReclaimFreesRetiredCopiesWhoseLocksEndedAndAbandonedOnesPastTheirEnd) {
  shard_->AssertHeld();
  ResidentEntry* entry = Admit(KeyN(0), 0);
  shard_->LockReadLocked(entry, kReadLease, kReader, 1, {}, now_, 2 * kTtl);
  shard_->DeleteLocked(KeyN(0), true, now_, &freed_);
  Stage(KeyN(1), kMiB, kLoader, kOtherLease);
  shard_->DeleteLocked(KeyN(1), true, now_, &freed_);
  now_ += kTtl;  // the abandoned copy's lease ended; the retired copy's lock has not
  shard_->ReclaimLocked(now_, &freed_);
  EXPECT_EQ(freed_, std::vector<Offset>{kMiB});
  now_ += kTtl;
  shard_->ReclaimLocked(now_, &freed_);
  EXPECT_EQ(freed_, (std::vector<Offset>{kMiB, 0}));
  EXPECT_EQ(Stats().retired_objects, 0u);
}

// --- handover -----------------------------------------------------------------------------

TEST_F(ObjectShardTest, AnAdoptedKeyIsResidentOnceAndAHeldSlotEndsOnlyWithTime) {
  shard_->AssertHeld();
  ASSERT_NE(shard_->AdoptLocked(KeyN(0), 0, kSize), nullptr);
  EXPECT_EQ(shard_->AdoptLocked(KeyN(0), kMiB, kSize), nullptr);
  EXPECT_EQ(Info(KeyN(0))->offset, 0u);
  shard_->HoldLocked(2 * kMiB, kSize, now_ + kTtl);
  // No lease names it: neither a finish nor an abort of "no lease" frees it.
  EXPECT_FALSE(shard_->AbortLocked(ObjectKey{}, kNoLease, &freed_));
  EXPECT_EQ(shard_->AdmitLocked(ObjectKey{}, kNoLease, now_, &freed_).outcome,
            WriteOutcome::kNotStaged);
  shard_->ReclaimLocked(now_, &freed_);
  EXPECT_TRUE(freed_.empty());
  std::vector<Offset> held;
  shard_->ForEachHeldSlotLocked([&held](Offset offset, std::uint64_t) { held.push_back(offset); });
  EXPECT_EQ(held, std::vector<Offset>{2 * kMiB});
  now_ += kTtl;
  shard_->ReclaimLocked(now_, &freed_);
  EXPECT_EQ(freed_, std::vector<Offset>{2 * kMiB});
}

TEST_F(ObjectShardTest, EveryHeldSlotIsListedForAHandover) {
  shard_->AssertHeld();
  ResidentEntry* entry = Admit(KeyN(0), 0);
  shard_->LockReadLocked(entry, kReadLease, kReader, 1, {}, now_, kTtl);
  shard_->DeleteLocked(KeyN(0), true, now_, &freed_);  // retired
  Stage(KeyN(1), kMiB, kWorker, kOtherLease);          // staged
  Stage(KeyN(2), 2 * kMiB, kWorker, kOtherLease);
  now_ += kTtl;
  shard_->ReclaimLocked(now_, &freed_);                // KeyN(1..2) quarantined
  Stage(KeyN(3), 3 * kMiB, kLoader, kLease);           // staged
  shard_->DeleteLocked(KeyN(3), true, now_, &freed_);  // abandoned
  Stage(KeyN(4), 4 * kMiB, kLoader, kLease);           // staged
  std::vector<Offset> held;
  shard_->ForEachHeldSlotLocked([&held](Offset offset, std::uint64_t) { held.push_back(offset); });
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<Offset>{kMiB, 2 * kMiB, 3 * kMiB, 4 * kMiB}));
  EXPECT_EQ(freed_, std::vector<Offset>{0});  // the retired copy's lock expired with the reclaim
}

}  // namespace
}  // namespace lmcache::store
