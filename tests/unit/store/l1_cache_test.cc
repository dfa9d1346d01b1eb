// L1Cache: assembles segment, allocator, policy, table and evictor in order,
// refuses what it cannot build with a message that says what to change, wires
// the table's listeners, and removes its segment when it goes.
#include "store/l1_cache.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "fakes/wait_until.h"
#include "fakes/fake_clock.h"
#include "fakes/keys.h"
#include "fakes/prefault_gate.h"

namespace lmcache::store {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

using testing::WaitUntil;

// Whether thread `tid` of this process is asleep (state S in its
// /proc/self/task/<tid>/stat; the state follows the last ')' of the name).
bool ThreadSleeps(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const std::size_t name_end = line.rfind(')');
  return name_end != std::string::npos && name_end + 2 < line.size() && line[name_end + 2] == 'S';
}

class L1CacheTest : public ::testing::Test {
 protected:
  L1CacheTest() {
    config_.shm_name = "lmcache_l1_pool_l1_test_" + std::to_string(getpid());
    config_.size_bytes = 16 * kMiB;
    config_.prefault_threads = 1;
    config_.allocator.slab_target_bytes = 2 * kMiB;
  }
  bool SegmentExists() const { return std::filesystem::exists("/dev/shm/" + config_.shm_name); }
  // Stages and admits `n` objects of 1 MiB.
  static void Store(L1Cache& cache, std::uint64_t first, std::size_t n) {
    auto lease = cache.table().ReserveWrite(testing::KeysN(first, n), kMiB, Owner::Instance(1),
                                            AllocationMode::kAllOrNothing);
    ASSERT_TRUE(lease.ok());
    ASSERT_EQ(lease->reserved, n);
    ASSERT_EQ(cache.table().FinishWrite(lease->lease).admitted, n);
  }

  // A takeover's adoption: the segment behind (a duplicate of) `fd`, as the
  // successor receives it, adopted under `config`.
  Result<std::unique_ptr<L1Cache>> AdoptFd(const L1Config& config, int fd, const PoolImage& image,
                                           AdoptionReport* report) {
    LMC_ASSIGN_OR_RETURN(auto segment,
                         shm::ShmSegment::Adopt(config.shm_name, UniqueFd(dup(fd)), config.size_bytes));
    return L1Cache::Adopt(config, &clock_, std::move(segment), image, report);
  }

  L1Config config_;
  testing::FakeClock clock_;
};

TEST_F(L1CacheTest, BuildsAWorkingTierAndRemovesItsSegmentWhenDestroyed) {
  {
    auto cache = L1Cache::Create(config_, &clock_);
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    EXPECT_TRUE(SegmentExists());
    EXPECT_EQ((*cache)->segment().size(), 16 * kMiB);
    EXPECT_EQ((*cache)->allocator().capacity_bytes(), 16 * kMiB);
    ASSERT_TRUE((*cache)->WaitPrefaulted(std::chrono::seconds(30)));
    EXPECT_EQ((*cache)->prefault().ready_bytes, 16 * kMiB);
    Store(**cache, 0, 3);
    EXPECT_EQ((*cache)->table().Stats().resident_objects, 3u);
    EXPECT_EQ((*cache)->flow().admitted_objects, 3u);  // the flow counters listen
    EXPECT_EQ((*cache)->flow().admitted_bytes, 3 * kMiB);
  }
  EXPECT_FALSE(SegmentExists());
}

TEST_F(L1CacheTest, PrefaultsInTheBackgroundAndHandsOutOnlyFaultedPages) {
  config_.size_bytes = 64 * kMiB;
  config_.prefault_step_bytes = 8 * kMiB;
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(cache.ok());
  // Whatever was faulted when a store ran, the store got pages below it.
  auto lease = (*cache)->table().ReserveWrite(testing::KeysN(0, 40), kMiB, Owner::Instance(1),
                                              AllocationMode::kAllOrNothing);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->reserved, 40u);  // it waited for pages rather than fail
  ASSERT_TRUE((*cache)->WaitPrefaulted(std::chrono::seconds(30)));
  const L1Cache::PrefaultProgress done = (*cache)->prefault();
  EXPECT_TRUE(done.done);
  EXPECT_EQ(done.ready_bytes, done.total_bytes);
  EXPECT_EQ((*cache)->allocator().Stats().unready_bytes, 0u);
  (*cache)->table().AbortWrite(lease->lease);
}

TEST_F(L1CacheTest, WithoutBackgroundPrefaultEveryPageIsUsableAtOnce) {
  config_.background_prefault = false;
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(cache.ok());
  EXPECT_TRUE((*cache)->prefault().done);
  EXPECT_EQ((*cache)->allocator().ready_bytes(), 16 * kMiB);
}

TEST_F(L1CacheTest, TheEvictorListensAndRunsWhenAnAdmissionCrossesTheTrigger) {
  config_.evictor.interval_ms = 3'600'000;  // only a nudge can run a pass here
  config_.background_prefault = false;
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(cache.ok());
  Store(**cache, 0, 14);  // 87.5 % of 16 MiB
  // Listeners hear of an eviction after its memory is freed (listener.h): wait for both.
  const auto settled = [&] {
    return (*cache)->allocator().UsedBytes() <= 9 * kMiB &&
           (*cache)->flow().evicted_objects == 14u - (*cache)->table().Stats().resident_objects;
  };
  WaitUntil(settled);
  EXPECT_LE((*cache)->allocator().UsedBytes(), 9 * kMiB);  // down to 0.6 of the pool
  EXPECT_EQ((*cache)->flow().evicted_objects, 14u - (*cache)->table().Stats().resident_objects);
  EXPECT_GE((*cache)->evictor().Stats().nudges, 1u);
}

TEST_F(L1CacheTest, WithoutBackgroundEvictionNothingIsEvictedBehindTheCallersBack) {
  config_.background_eviction = false;
  config_.background_prefault = false;
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(cache.ok());
  Store(**cache, 0, 15);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ((*cache)->table().Stats().resident_objects, 15u);
  EXPECT_EQ((*cache)->evictor().Stats().passes, 0u);
}

TEST_F(L1CacheTest, ASecondCacheOnALiveSegmentIsRefusedAndTheFirstKeepsItsPool) {
  auto first = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(first.ok());
  Store(**first, 0, 2);
  auto second = L1Cache::Create(config_, &clock_);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(std::to_string(getpid())), std::string::npos)
      << second.status().ToString();
  EXPECT_TRUE(SegmentExists());
  EXPECT_EQ((*first)->table().Stats().resident_objects, 2u);
}

TEST_F(L1CacheTest, APoolLargerThanDevShmIsRefusedWithTheFix) {
  config_.size_bytes = 1ull << 50;  // 1 PiB
  auto cache = L1Cache::Create(config_, &clock_);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), ErrorCode::kShmTooSmall);
  EXPECT_NE(cache.status().message().find("--l1-size-gb"), std::string::npos);
  EXPECT_FALSE(SegmentExists());
}

TEST_F(L1CacheTest, InvalidPolicyOrEvictorSettingsAreRefusedBeforeAnythingIsBuilt) {
  config_.eviction_policy = "FIFO";
  EXPECT_EQ(L1Cache::Create(config_, &clock_).status().code(), ErrorCode::kInvalidConfig);
  config_.eviction_policy = "LRU";
  config_.evictor.eviction_ratio = 0;
  auto refused = L1Cache::Create(config_, &clock_);
  EXPECT_NE(refused.status().message().find("--eviction-ratio"), std::string::npos);
  EXPECT_FALSE(SegmentExists());
}

// Warm restart in one process: a successor adopts the predecessor's
// segment through a duplicate of its descriptor (what SCM_RIGHTS hands over)
// and serves every committed object at the same offset with the same bytes.
TEST_F(L1CacheTest, ASuccessorAdoptsThePoolInPlaceAndOwnsItsName) {
  auto first = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  L1Cache& a = **first;
  ASSERT_TRUE(a.WaitPrefaulted(std::chrono::seconds(30)));
  Store(a, 0, 6);
  for (std::uint64_t i = 0; i < 6; ++i) {
    const auto info = a.table().Find(testing::KeysN(i, 1)[0]);
    ASSERT_TRUE(info);
    std::memset(a.segment().base() + info->offset, static_cast<int>(0x40 + i), kMiB);
  }
  // One object read-locked, one copy staged (a worker may still write it).
  const std::vector<ObjectKey> read_key = testing::KeysN(1, 1);
  ReadRequest request;
  request.keys = read_key;
  request.owner = Owner::Session(1);
  auto read = a.table().AcquireRead(request);
  ASSERT_TRUE(read.ok());
  auto staged = a.table().ReserveWrite(testing::KeysN(100, 1), kMiB, Owner::Instance(2),
                                       AllocationMode::kAllOrNothing);
  ASSERT_TRUE(staged.ok());
  const Offset staged_offset = staged->offsets[0];

  const PoolImage image = a.StopAndExport();
  EXPECT_EQ(image.table.resident.size(), 6u);
  ASSERT_EQ(image.table.held.size(), 1u);
  AdoptionReport report;
  auto second = AdoptFd(config_, a.segment().fd(), image, &report);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  L1Cache& b = **second;
  EXPECT_EQ(report.objects, 6u);
  EXPECT_EQ(report.bytes, 6 * kMiB);
  EXPECT_EQ(report.read_locked, 1u);
  EXPECT_EQ(report.held_slots, 1u);
  a.Disown();
  first->reset();
  EXPECT_TRUE(SegmentExists()) << "the predecessor removed the name it handed over";

  for (std::uint64_t i = 0; i < 6; ++i) {
    const auto info = b.table().Find(testing::KeysN(i, 1)[0]);
    ASSERT_TRUE(info) << i;
    const std::byte* bytes = b.segment().base() + info->offset;
    EXPECT_EQ(bytes[0], static_cast<std::byte>(0x40 + i));
    EXPECT_EQ(bytes[kMiB - 1], static_cast<std::byte>(0x40 + i));
  }
  EXPECT_FALSE(b.table().Find(testing::KeysN(100, 1)[0])) << "a staged copy is never served";
  EXPECT_EQ(b.table().Stats().resident_objects, 6u);
  EXPECT_EQ(b.table().Stats().read_locks, 1u);
  // The pool fills: no new object lands on the held slot while the write
  // TTL runs, and the read-locked object is not evicted for room.
  std::set<Offset> handed_out;
  auto fill = b.table().ReserveWrite(testing::KeysN(200, 16), kMiB, Owner::Instance(3),
                                     AllocationMode::kLongestPrefix);
  ASSERT_TRUE(fill.ok());
  for (std::size_t i = 0; i < fill->outcomes.size(); ++i) {
    if (fill->outcomes[i] == WriteReservation::kReserved) handed_out.insert(fill->offsets[i]);
  }
  EXPECT_FALSE(handed_out.contains(staged_offset));
  EXPECT_TRUE(b.table().Find(testing::KeysN(1, 1)[0]));
  b.table().AbortWrite(fill->lease);
  // Once the write TTL passed, the held slot is memory like any other.
  clock_.Advance(config_.table.write_ttl_ms + 1);
  EXPECT_EQ(b.table().ReclaimExpired(), 1u);
  EXPECT_EQ(b.table().Stats().retired_objects, 0u);
  second->reset();
  EXPECT_FALSE(SegmentExists()) << "the successor owns the name now";
}

TEST_F(L1CacheTest, AnImageThatDoesNotFitThisPoolIsRefusedAndTheNameLeftAlone) {
  auto first = L1Cache::Create(config_, &clock_);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->WaitPrefaulted(std::chrono::seconds(30)));
  Store(**first, 0, 2);
  PoolImage image = (*first)->StopAndExport();
  image.table.resident.push_back(image.table.resident[0]);  // named twice
  AdoptionReport report;
  auto refused =
      AdoptFd(config_, (*first)->segment().fd(), image, &report);
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE(SegmentExists());
  L1Config other = config_;
  other.size_bytes = 32 * kMiB;
  image.table.resident.pop_back();
  auto wrong_size =
      AdoptFd(other, (*first)->segment().fd(), image, &report);
  EXPECT_EQ(wrong_size.status().code(), ErrorCode::kLayoutMismatch);
  EXPECT_TRUE(SegmentExists());
}

// A takeover while the predecessor is still pre-faulting: the successor
// takes over how far it got and pre-faults the rest itself (it never faults
// a page the predecessor already handed out).
TEST_F(L1CacheTest, ASuccessorPrefaultsOnFromWhereThePredecessorStopped) {
  config_.size_bytes = 32 * kMiB;
  testing::PrefaultGate gate(8 * kMiB);
  L1Config held = config_;
  gate.Hold(held, 4 * kMiB);
  auto first = L1Cache::Create(held, &clock_);
  ASSERT_TRUE(first.ok());
  L1Cache& a = **first;
  WaitUntil([&] { return a.prefault().ready_bytes >= 8 * kMiB; });
  ASSERT_EQ(a.prefault().ready_bytes, 8 * kMiB);
  Store(a, 0, 2);
  PoolImage image;
  std::atomic<pid_t> exporter_tid{0};
  std::atomic<bool> exported{false};
  std::thread exporter([&] {
    exporter_tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
    image = a.StopAndExport();
    exported.store(true);
  });
  // StopAndExport sets the stop and then joins the pre-faulter, which the gate
  // holds; nothing before that join blocks, so once the exporter thread is
  // asleep the stop is set. Opened earlier, the pre-faulter could finish the
  // pool before it saw the stop. (A pre-faulter that saw the stop before
  // reaching the gate needs no opening: the export is then done.)
  EXPECT_TRUE(WaitUntil([&] {
    const pid_t tid = exporter_tid.load();
    return exported.load() || (tid != 0 && ThreadSleeps(tid));
  })) << "the exporter never blocked joining the pre-faulter";
  gate.Open();  // the pre-faulter sees the stop at its next step
  exporter.join();
  ASSERT_LT(image.ready_bytes, config_.size_bytes);
  AdoptionReport report;
  auto second = AdoptFd(config_, a.segment().fd(), image, &report);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  a.Disown();
  first->reset();
  L1Cache& b = **second;
  EXPECT_EQ(report.objects, 2u);
  ASSERT_TRUE(b.WaitPrefaulted(std::chrono::seconds(30)));
  EXPECT_EQ(b.allocator().ready_bytes(), config_.size_bytes);
  // The whole pool is usable now, around the adopted objects.
  Store(b, 10, 20);
  EXPECT_EQ(b.table().Stats().resident_objects, 22u);
}

}  // namespace
}  // namespace lmcache::store
