// PoolJournal and PlanRecovery: what a journal records as slots are lent,
// objects committed and slots freed, and what recovery makes of it: only
// sealed objects whose bytes still verify are served, in commit order; slots
// a writer may hold are held; a journal of another segment or geometry, or a
// malformed one, is refused or dropped, never followed.
//
// The pool here is process memory and the records are made by the journal's
// own writer, driven the way ObjectTable drives it (Lent at reservation,
// Committed at admission, Freed before the allocator frees); the crash itself
// (a kill -9 of a real server under a store storm) is
// tests/python/test_crash_recovery.py.
#include "restart/pool_recovery.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include <gtest/gtest.h>

#include "fakes/crashed_pool.h"
#include "fakes/fake_clock.h"
#include "fakes/keys.h"
#include "restart/pool_journal_format.h"
#include "shm/shm_segment.h"

namespace lmcache::restart {
namespace {

using store::AdoptedObject;
using store::HeldSlot;
using store::ObjectKey;

namespace jf = journal_format;
constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kPool = 8 * 1024 * kKiB;
constexpr std::uint64_t kMiB = 1024 * kKiB;

class PoolRecoveryTest : public ::testing::Test {
 protected:
  PoolRecoveryTest() : pool_(kPool) {
    name_ = "lmcache_l1_pool_recovery_test_" + std::to_string(getpid());
    geometry_ = {{kPool, 4 * kKiB, 64 * kKiB, 256 * kKiB}, 7, 1234};
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
    journal_->Committed(key, at, 16 * kKiB, std::nullopt);
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
  other_align.pool.align_bytes = 8 * kKiB;
  refused = PlanRecovery(journal, pool_, other_align, 1);
  ASSERT_FALSE(refused.ok());
  // It names what differs, with both values and the flag that sets it.
  EXPECT_NE(refused.status().message().find(
                "another pool geometry: the alignment (--l1-align-bytes): 8192 here, 4096 in the "
                "journal"),
            std::string::npos)
      << refused.status().ToString();
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

// RecoverPool: a child process builds a journaled pool, stores six objects
// and stages a seventh, and is killed with SIGKILL (fakes/crashed_pool.h);
// the parent recovers the pool it left.
class RecoverPoolTest : public ::testing::Test {
 protected:
  RecoverPoolTest() {
    config_.shm_name = "lmcache_l1_pool_recover_test_" + std::to_string(getpid());
    config_.size_bytes = 16 * kMiB;
    config_.prefault_threads = 1;
    config_.allocator.slab_target_bytes = 2 * kMiB;
    config_.journal = MakePoolJournal;
  }
  ~RecoverPoolTest() override {
    std::filesystem::remove("/dev/shm/" + config_.shm_name);
    std::filesystem::remove("/dev/shm/" + JournalName(config_.shm_name));
  }
  bool SegmentExists() const { return std::filesystem::exists("/dev/shm/" + config_.shm_name); }
  std::optional<Offset> CrashAChildAfterStoring() {
    return testing::CrashAServerAfterStoring(config_, &clock_);
  }
  static PoolJournal& JournalOf(store::L1Cache& cache) {
    return dynamic_cast<PoolJournal&>(*cache.journal());
  }

  store::L1Config config_;
  testing::FakeClock clock_;
};

TEST_F(RecoverPoolTest, APoolLeftByAKilledServerIsRecoveredInPlace) {
  const std::optional<Offset> staged_offset = CrashAChildAfterStoring();
  ASSERT_TRUE(staged_offset);
  ASSERT_TRUE(SegmentExists()) << "a crash leaves the segment";
  RecoveryReport report;
  auto recovered = RecoverPool(config_, &clock_, &report);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  store::L1Cache& b = **recovered;
  EXPECT_EQ(report.objects, 6u);
  EXPECT_EQ(report.bytes, 6 * kMiB);
  EXPECT_EQ(report.staged, 2u);  // the copy being written and the retired object
  EXPECT_EQ(report.held_slots, 2u);
  for (std::uint64_t i = 0; i < 6; ++i) {
    const auto info = b.table().Find(testing::KeysN(i, 1)[0]);
    ASSERT_TRUE(info) << i;
    const std::byte* bytes = b.segment().base() + info->offset;
    EXPECT_EQ(bytes[0], static_cast<std::byte>(0x60 + i));
    EXPECT_EQ(bytes[kMiB - 1], static_cast<std::byte>(0x60 + i));
  }
  EXPECT_FALSE(b.table().Find(testing::KeysN(100, 1)[0]));
  EXPECT_FALSE(b.table().Find(testing::KeysN(50, 1)[0])) << "a deleted object came back";
  // The slot the dead server had lent is not lent again while the write TTL
  // runs: the 8 MiB left free fill up around it, evicting nothing.
  auto fill = b.table().ReserveWrite(testing::KeysN(200, 8), kMiB, store::Owner::Instance(3),
                                     store::AllocationMode::kAllOrNothing);
  ASSERT_TRUE(fill.ok());
  ASSERT_EQ(fill->reserved, 8u);
  for (const Offset offset : fill->offsets) EXPECT_NE(offset, *staged_offset);
  EXPECT_EQ(b.table().Stats().resident_objects, 6u);
  b.table().AbortWrite(fill->lease);
  // The recovered server journals too: it can itself be recovered.
  ASSERT_TRUE(JournalOf(b).WaitSealed(std::chrono::seconds(30)));
  EXPECT_EQ(JournalOf(b).Stats().sealed, 6u);
  b.Disown();  // as if it crashed as well
  recovered->reset();
  RecoveryReport again;
  auto third = RecoverPool(config_, &clock_, &again);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(again.objects, 6u);
  EXPECT_EQ(again.held_slots, 2u);
  // Eviction order survives both recoveries: the batch's last key is the
  // oldest, its first the most recent, as the policy had them in the child.
  EXPECT_EQ((*third)->table().EvictLru(kMiB).objects, 1u);
  EXPECT_FALSE((*third)->table().Find(testing::KeysN(5, 1)[0]));
  EXPECT_TRUE((*third)->table().Find(testing::KeysN(0, 1)[0]));
  EXPECT_EQ((*third)->table().EvictLru(4 * kMiB).objects, 4u);
  EXPECT_TRUE((*third)->table().Find(testing::KeysN(0, 1)[0]));
  third->reset();
  EXPECT_FALSE(SegmentExists()) << "the recovered server owns the name";
}

// A slot one recovery held (a write the dead server had lent, an object it
// had withdrawn) keeps that hold's end through the next crash. Before, every
// recovery held such slots for a whole new write TTL, so a server killed
// again and again within a TTL held them for as long as the crashes went on,
// each crash adding the slots it had lent: python_crash_recovery_test lost
// sealed prompts to the evictions that the shrunken pool forced (299 slots,
// 29 % of its pool, held at its 20th kill).
TEST_F(RecoverPoolTest, ASlotHeldAfterOneCrashIsHeldNoLongerAfterTheNext) {
  ASSERT_TRUE(CrashAChildAfterStoring());
  const TimeMs ttl = config_.table.write_ttl_ms;
  auto held = [](store::L1Cache& cache) { return cache.table().Stats().retired_objects; };
  RecoveryReport first;
  auto recovered = RecoverPool(config_, &clock_, &first);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_EQ(first.held_slots, 2u);
  EXPECT_EQ(held(**recovered), 2u);
  clock_.Advance(ttl / 2);
  (*recovered)->Disown();  // it is killed too, half a write TTL later
  recovered->reset();
  RecoveryReport second;
  auto again = RecoverPool(config_, &clock_, &second);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(second.objects, 6u);
  EXPECT_EQ(second.held_slots, 2u);
  store::L1Cache& c = **again;
  (void)c.table().ReclaimExpired();
  EXPECT_EQ(held(c), 2u) << "released before the first recovery's hold ended";
  // Past the first hold's end; a hold the second recovery began anew would
  // run for another half TTL.
  clock_.Advance(ttl / 2 + 1);
  (void)c.table().ReclaimExpired();
  EXPECT_EQ(held(c), 0u) << "the second recovery held the slots for a new write TTL";
  // Freed and journaled as free: a third recovery holds nothing of them.
  c.Disown();
  again->reset();
  RecoveryReport third;
  auto last = RecoverPool(config_, &clock_, &third);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(third.objects, 6u);
  EXPECT_EQ(third.held_slots, 0u);
}

// A hold that has ended by the time of the next recovery (its server died
// before its evictor's pass freed it) is freed by the recovery, not held.
TEST_F(RecoverPoolTest, AHoldThatEndedBeforeTheNextRecoveryIsFreedByIt) {
  config_.background_eviction = false;  // nothing frees the held slots but the recovery
  ASSERT_TRUE(CrashAChildAfterStoring());
  RecoveryReport first;
  auto recovered = RecoverPool(config_, &clock_, &first);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  ASSERT_EQ(first.held_slots, 2u);
  clock_.Advance(config_.table.write_ttl_ms + 1);
  (*recovered)->Disown();
  recovered->reset();
  RecoveryReport second;
  auto again = RecoverPool(config_, &clock_, &second);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(second.objects, 6u);
  EXPECT_EQ(second.held_slots, 0u);
  EXPECT_EQ(second.holds_ended, 2u);
  EXPECT_EQ((*again)->table().Stats().retired_objects, 0u);
  // Their memory is free: 8 MiB free plus the two slots take ten objects.
  auto fill = (*again)->table().ReserveWrite(testing::KeysN(300, 10), kMiB, store::Owner::Instance(4),
                                             store::AllocationMode::kAllOrNothing);
  ASSERT_TRUE(fill.ok()) << fill.status().ToString();
  EXPECT_EQ(fill->reserved, 10u);
  EXPECT_EQ((*again)->table().Stats().resident_objects, 6u) << "it evicted to make room";
}

// A journal's hold end is untrusted: one beyond a write TTL from now (a clock
// of another boot, a corrupt record) is held for a write TTL, never longer.
TEST_F(RecoverPoolTest, AHoldEndBeyondAWriteTtlIsCutToOne) {
  ASSERT_TRUE(CrashAChildAfterStoring());
  const TimeMs ttl = config_.table.write_ttl_ms;
  RecoveryReport first;
  auto recovered = RecoverPool(config_, &clock_, &first);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  (*recovered)->Disown();
  recovered->reset();
  clock_.Advance(-ttl / 2);  // the next server's clock reads earlier: the hold ends 1.5 TTL ahead
  RecoveryReport second;
  auto again = RecoverPool(config_, &clock_, &second);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(second.held_slots, 2u);
  clock_.Advance(ttl);
  (void)(*again)->table().ReclaimExpired();
  EXPECT_EQ((*again)->table().Stats().retired_objects, 0u);
}

TEST_F(RecoverPoolTest, NothingToRecoverOrALiveOwnerOrAnotherSegmentIsRefused) {
  RecoveryReport report;
  EXPECT_EQ(RecoverPool(config_, &clock_, &report).status().code(), ErrorCode::kNotFound);
  auto live = store::L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(live.ok());
  auto refused = RecoverPool(config_, &clock_, &report);
  EXPECT_EQ(refused.status().code(), ErrorCode::kAlreadyExists) << refused.status().ToString();
  live->reset();
  // A journal beside a segment it does not describe is refused, the segment left alone.
  ASSERT_TRUE(CrashAChildAfterStoring());
  std::filesystem::remove("/dev/shm/" + config_.shm_name);
  auto other = shm::ShmSegment::Create({config_.shm_name, config_.size_bytes});
  ASSERT_TRUE(other.ok());
  (*other)->Disown();
  other->reset();
  auto mismatched = RecoverPool(config_, &clock_, &report);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("another segment"), std::string::npos)
      << mismatched.status().ToString();
  EXPECT_TRUE(SegmentExists());
}


}  // namespace
}  // namespace lmcache::restart
