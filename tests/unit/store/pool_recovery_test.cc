// PoolJournal and PlanRecovery: what a journal records as slots are lent,
// objects committed and slots freed, and what recovery makes of it: only
// sealed objects whose bytes still verify are served, in commit order; slots
// a writer may hold are held; a journal of another segment or geometry, or a
// malformed one, is refused or dropped, never followed.
//
// The pool here is process memory and the records are made by the journal's
// own writer, driven the way ObjectTable drives it (Staged at reservation,
// Committed at admission, Freed before the allocator frees); the crash itself
// (a kill -9 of a real server under a store storm) is
// tests/python/test_crash_recovery.py.
#include "store/pool_recovery.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include <gtest/gtest.h>

#include "fakes/keys.h"
#include "store/pool_journal_format.h"

namespace lmcache::store {
namespace {

namespace jf = journal_format;
constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kPool = 8 * 1024 * kKiB;

class PoolRecoveryTest : public ::testing::Test {
 protected:
  PoolRecoveryTest() : pool_(kPool) {
    name_ = "lmcache_l1_pool_recovery_test_" + std::to_string(getpid());
    geometry_ = {kPool, 4 * kKiB, 64 * kKiB, 256 * kKiB, 7, 1234};
  }
  ~PoolRecoveryTest() override {
    journal_.reset();
    std::filesystem::remove("/dev/shm/" + JournalName(name_));
  }
  void Open() {
    auto journal = PoolJournal::Create(name_, geometry_, pool_);
    ASSERT_TRUE(journal.ok()) << journal.status().ToString();
    journal_ = std::move(journal).value();
    ASSERT_TRUE(journal_->Publish().ok());
    journal_->ReadyBytes(kPool);
    // One slab of 16 KiB objects at page 2 (16 slots), as the allocator reports it.
    journal_->SlabAdded({2, 4, 16 * kKiB});
  }
  static Offset Slot(std::uint64_t i) { return 2 * 64 * kKiB + i * 16 * kKiB; }
  // A committed object whose bytes are a function of `n`.
  void Store(std::uint64_t n, Offset at, const ObjectKey& key) {
    const Offset offsets[] = {at};
    journal_->Lent(offsets, 16 * kKiB);
    for (std::uint64_t i = 0; i < 16 * kKiB; ++i) pool_[at + i] = std::byte(n * 31 + i % 251);
    journal_->Committed(key, at, 16 * kKiB);
  }
  std::vector<std::byte> JournalBytes() {
    EXPECT_TRUE(journal_->WaitSealed(std::chrono::seconds(10)));
    auto file = JournalFile::Open(name_);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    return {file->bytes().begin(), file->bytes().end()};
  }
  Result<RecoveryPlan> Plan(const std::vector<std::byte>& journal) {
    return PlanRecovery(journal, pool_, geometry_, 2);
  }
  jf::Record& RecordAt(std::vector<std::byte>& journal, std::uint64_t index) {
    const jf::Parts parts = jf::PartsFor(kPool / (64 * kKiB), kPool / (4 * kKiB));
    return reinterpret_cast<jf::Record*>(journal.data() + parts.records)[index];
  }

  std::string name_;
  JournalGeometry geometry_;
  std::vector<std::byte> pool_;
  std::unique_ptr<PoolJournal> journal_;
};

TEST_F(PoolRecoveryTest, SealedObjectsComeBackInCommitOrderWithTheirWholeKeys) {
  Open();
  ObjectKey tagged = testing::KeyN(7, "org/model-70b", 0x01000100);
  tagged.cache_salt = "tenant-a";
  tagged.tags = "team%infra";
  tagged.layout_namespace = 0xabcdef01;
  tagged.object_group_id = 2;
  Store(1, Slot(3), testing::KeyN(1));
  Store(2, Slot(0), tagged);
  Store(3, Slot(9), testing::KeyN(3));
  auto plan = Plan(JournalBytes());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->image.table.resident.size(), 3u);
  EXPECT_EQ(plan->image.table.resident[0].key, testing::KeyN(1));
  EXPECT_EQ(plan->image.table.resident[0].offset, Slot(3));
  EXPECT_EQ(plan->image.table.resident[1].key, tagged);
  EXPECT_EQ(plan->image.table.resident[2].offset, Slot(9));
  EXPECT_EQ(plan->image.table.resident[2].size, 16 * kKiB);
  EXPECT_TRUE(plan->image.table.held.empty());
  EXPECT_EQ(plan->report.objects, 3u);
  EXPECT_EQ(plan->report.bytes, 3 * 16 * kKiB);
  ASSERT_EQ(plan->image.slabs.size(), 1u);
  EXPECT_EQ(plan->image.slabs[0], (alloc::SlabRecord{2, 4, 16 * kKiB}));
  EXPECT_EQ(plan->image.ready_bytes, kPool);
  EXPECT_EQ(journal_->Stats().sealed, 3u);
}

TEST_F(PoolRecoveryTest, StagedUnsealedAndChangedObjectsAreHeldNeverServed) {
  Open();
  const Offset staged[] = {Slot(5)};
  journal_->Lent(staged, 16 * kKiB);
  Store(1, Slot(1), testing::KeyN(1));
  Store(2, Slot(2), testing::KeyN(2));
  Store(3, Slot(3), testing::KeyN(3));
  std::vector<std::byte> journal = JournalBytes();
  // Record 2 (KeyN(2)) as the sealer had not reached it: committed, not sealed.
  jf::Record& unsealed = RecordAt(journal, 2);
  ASSERT_EQ(unsealed.state & 3, jf::kSealed);
  unsealed.state = (unsealed.state & ~std::uint64_t{3}) | jf::kCommitted;
  // KeyN(3)'s bytes changed after its seal (a stray write).
  pool_[Slot(3) + 100] ^= std::byte{1};
  auto plan = Plan(journal);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->image.table.resident.size(), 1u);
  EXPECT_EQ(plan->image.table.resident[0].key, testing::KeyN(1));
  EXPECT_EQ(plan->report.staged, 1u);
  EXPECT_EQ(plan->report.unsealed, 1u);
  EXPECT_EQ(plan->report.checksum_mismatches, 1u);
  EXPECT_EQ(plan->report.held_slots, 3u);
  EXPECT_EQ(plan->report.held_bytes, 3 * 16 * kKiB);
  std::vector<Offset> held;
  for (const HeldSlot& slot : plan->image.table.held) held.push_back(slot.offset);
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<Offset>{Slot(2), Slot(3), Slot(5)}));
}

TEST_F(PoolRecoveryTest, AFreedSlotIsForgottenAndItsNextLifeWins) {
  Open();
  Store(1, Slot(4), testing::KeyN(1));
  ASSERT_TRUE(journal_->WaitSealed(std::chrono::seconds(10)));
  journal_->Freed(Slot(4));
  Store(2, Slot(4), testing::KeyN(2));  // the slot lent again, to another key
  Store(3, Slot(6), testing::KeyN(3));
  journal_->Freed(Slot(6));
  auto plan = Plan(JournalBytes());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->image.table.resident.size(), 1u);
  EXPECT_EQ(plan->image.table.resident[0].key, testing::KeyN(2));
  EXPECT_EQ(plan->report.records, 1u);
  EXPECT_TRUE(plan->image.table.held.empty());
  EXPECT_EQ(journal_->Stats().records, 1u);
}

TEST_F(PoolRecoveryTest, ASlotNamedByTwoRecordsGoesToTheNewerAndAKeyNamedTwiceToo) {
  Open();
  Store(1, Slot(1), testing::KeyN(1));
  Store(2, Slot(2), testing::KeyN(1));  // the same key again (its first slot not yet freed)
  std::vector<std::byte> journal = JournalBytes();
  // A torn free: record 0's slot recorded as lent again by a newer record 2.
  jf::Record copy = RecordAt(journal, 0);
  copy.state = (std::uint64_t{99} << jf::kStateBits) | jf::kLent;
  RecordAt(journal, 2) = copy;
  auto header = reinterpret_cast<jf::Header*>(journal.data());
  header->records_used = 3;
  auto plan = Plan(journal);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Slot 1: the newer record (staged) wins; slot 2 serves KeyN(1).
  ASSERT_EQ(plan->image.table.resident.size(), 1u);
  EXPECT_EQ(plan->image.table.resident[0].offset, Slot(2));
  ASSERT_EQ(plan->image.table.held.size(), 1u);
  EXPECT_EQ(plan->image.table.held[0].offset, Slot(1));
  EXPECT_EQ(plan->report.superseded, 1u);
}

TEST_F(PoolRecoveryTest, RecordsNoRecordedSlabHoldsAreDropped) {
  Open();
  Store(1, Slot(1), testing::KeyN(1));
  Store(2, 9 * 64 * kKiB, testing::KeyN(2));       // page 9: no slab there
  Store(3, Slot(5) + 4 * kKiB, testing::KeyN(3));  // inside the slab, not a slot start
  auto plan = Plan(JournalBytes());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->image.table.resident.size(), 1u);
  EXPECT_EQ(plan->report.outside_slabs, 2u);
  journal_->SlabReleased({2, 4, 16 * kKiB});
  auto without_slab = Plan(JournalBytes());
  ASSERT_TRUE(without_slab.ok());
  EXPECT_TRUE(without_slab->image.table.resident.empty());
  EXPECT_TRUE(without_slab->image.slabs.empty());
}

TEST_F(PoolRecoveryTest, SlabsBeyondTheReadyPagesAreDropped) {
  Open();
  Store(1, Slot(1), testing::KeyN(1));
  journal_->ReadyBytes(3 * 64 * kKiB);  // the slab spans pages 2..5
  auto plan = Plan(JournalBytes());
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->image.slabs.empty());
  EXPECT_EQ(plan->report.outside_slabs, 1u);
  EXPECT_EQ(plan->image.ready_bytes, 3 * 64 * kKiB);
}

TEST_F(PoolRecoveryTest, AJournalOfAnotherSegmentOrGeometryOrAMalformedOneIsRefused) {
  Open();
  Store(1, Slot(1), testing::KeyN(1));
  std::vector<std::byte> journal = JournalBytes();
  JournalGeometry other_segment = geometry_;
  other_segment.segment_inode += 1;
  auto refused = PlanRecovery(journal, pool_, other_segment, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("another segment"), std::string::npos);
  JournalGeometry other_align = geometry_;
  other_align.align_bytes = 8 * kKiB;
  refused = PlanRecovery(journal, pool_, other_align, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("geometry"), std::string::npos);
  EXPECT_FALSE(PlanRecovery(std::span(journal).first(100), pool_, geometry_, 1).ok());
  EXPECT_FALSE(
      PlanRecovery(std::span(journal).first(journal.size() - 4096), pool_, geometry_, 1).ok());
  std::vector<std::byte> bad = journal;
  reinterpret_cast<jf::Header*>(bad.data())->records_used = kPool;  // beyond the capacity
  EXPECT_FALSE(Plan(bad).ok());
  bad = journal;
  reinterpret_cast<jf::Header*>(bad.data())->magic = 0;
  EXPECT_FALSE(Plan(bad).ok());
  // A garbled namespace entry loses its objects, not the recovery.
  bad = journal;
  const jf::Parts parts = jf::PartsFor(kPool / (64 * kKiB), kPool / (4 * kKiB));
  std::memset(bad.data() + parts.namespaces, 0xff, 4);
  auto garbled = Plan(bad);
  ASSERT_TRUE(garbled.ok()) << garbled.status().ToString();
  EXPECT_TRUE(garbled->image.table.resident.empty());
  EXPECT_EQ(garbled->report.undecodable, 1u);
  EXPECT_EQ(garbled->report.held_slots, 1u);
}

// Found by journal_fuzzer: an area mark that cuts the last entry's padding
// short sent the reader past the end of the area (and of the file).
TEST_F(PoolRecoveryTest, ANamespaceAreaCutInsideAnEntrysPaddingEndsTheArea) {
  Open();
  ObjectKey odd = testing::KeyN(1, "abc");  // a body whose entry needs padding
  Store(1, Slot(1), odd);
  std::vector<std::byte> journal = JournalBytes();
  auto header = reinterpret_cast<jf::Header*>(journal.data());
  const std::uint64_t body = EncodeKeyNamespace(odd).size();
  ASSERT_NE((4 + body) % 8, 0u);
  header->namespace_bytes = 4 + body;
  auto plan = Plan(journal);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->report.objects, 1u);
}

TEST_F(PoolRecoveryTest, TheJournalFileIsPrivateAndGoesWithItsOwnerUnlessDisowned) {
  Open();
  const std::filesystem::path path = "/dev/shm/" + JournalName(name_);
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  journal_.reset();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(JournalFile::Open(name_).status().code(), ErrorCode::kNotFound);
  Open();
  journal_->Disown();
  journal_.reset();
  EXPECT_TRUE(std::filesystem::exists(path));
  // A new journal replaces a leftover whole, and only once published (a
  // recovery publishes once everything it adopted is recorded): until then,
  // and if it is dropped unpublished, the leftover stays as it was.
  Open();
  Store(1, Slot(1), testing::KeyN(1));
  ASSERT_TRUE(journal_->WaitSealed(std::chrono::seconds(10)));
  journal_->Disown();
  journal_.reset();
  auto unpublished = PoolJournal::Create(name_, geometry_, pool_);
  ASSERT_TRUE(unpublished.ok());
  auto still_old = JournalFile::Open(name_);
  ASSERT_TRUE(still_old.ok());
  auto old_plan = PlanRecovery(still_old->bytes(), pool_, geometry_, 1);
  ASSERT_TRUE(old_plan.ok());
  EXPECT_EQ(old_plan->report.objects, 1u);
  unpublished->reset();
  ASSERT_TRUE(std::filesystem::exists(path)) << "an unpublished journal removed the leftover";
  Open();
  auto fresh = JournalFile::Open(name_);
  ASSERT_TRUE(fresh.ok());
  auto plan = PlanRecovery(fresh->bytes(), pool_, geometry_, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->report.records, 0u);
  std::size_t staging_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    staging_files += entry.path().filename().string().starts_with(JournalName(name_) + ".new-");
  }
  EXPECT_EQ(staging_files, 0u);
}

TEST_F(PoolRecoveryTest, AnObjectThatLeftTheIndexIsHeldNotServedAndAVerifiedOneIsSealedAtOnce) {
  Open();
  Store(1, Slot(1), testing::KeyN(1));
  Store(2, Slot(2), testing::KeyN(2));
  ASSERT_TRUE(journal_->WaitSealed(std::chrono::seconds(10)));
  journal_->Withdrawn(Slot(1));  // deleted while a lease still reads it
  EXPECT_EQ(journal_->Stats().sealed, 1u);
  // A recovery's verified object: sealed with its checksum, nothing queued.
  const Offset at[] = {Slot(3)};
  journal_->Lent(at, 16 * kKiB);
  journal_->Committed(testing::KeyN(3), Slot(3), 16 * kKiB, 0x1234);
  EXPECT_EQ(journal_->Stats().sealed, 2u);
  EXPECT_EQ(journal_->Stats().awaiting_seal, 0u);
  auto plan = Plan(JournalBytes());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->image.table.resident.size(), 1u);
  EXPECT_EQ(plan->image.table.resident[0].key, testing::KeyN(2));
  ASSERT_TRUE(plan->image.table.resident[0].checksum.has_value());
  EXPECT_EQ(plan->report.checksum_mismatches, 1u);  // 0x1234 is not KeyN(3)'s bytes' checksum
  std::vector<Offset> held;
  for (const HeldSlot& slot : plan->image.table.held) held.push_back(slot.offset);
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<Offset>{Slot(1), Slot(3)}));
}

TEST_F(PoolRecoveryTest, KeyNamespacesRoundTripAndRefuseWhatTheEncoderCannotMake) {
  ObjectKey key = testing::KeyN(5, "m/odel", 3);
  key.cache_salt = "s";
  key.tags = "a%b";
  const std::string body = EncodeKeyNamespace(key);
  auto bytes = std::as_bytes(std::span(body));
  auto decoded = DecodeKeyNamespace(bytes);
  ASSERT_TRUE(decoded.ok());
  decoded->chunk_hash = key.chunk_hash;
  EXPECT_EQ(*decoded, key);
  EXPECT_FALSE(DecodeKeyNamespace(bytes.first(bytes.size() - 1)).ok());
  std::string longer = body + "x";
  EXPECT_FALSE(DecodeKeyNamespace(std::as_bytes(std::span(longer))).ok());
  ObjectKey invalid = key;
  invalid.model_name = "a@b";  // ValidateObjectKey refuses '@'
  const std::string refused = EncodeKeyNamespace(invalid);
  EXPECT_FALSE(DecodeKeyNamespace(std::as_bytes(std::span(refused))).ok());
}

}  // namespace
}  // namespace lmcache::store
