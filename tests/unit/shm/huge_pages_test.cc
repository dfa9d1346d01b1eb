// The huge-page plan from what the system reports. The mountinfo lines are
// this CI VM's own /proc/self/mountinfo lines for /dev/shm (two tmpfs mounts
// stacked there), and the shmem_enabled texts are the kernel's own format.
#include "shm/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "shm/shm_segment.h"

namespace lmcache::shm {
namespace {

constexpr std::string_view kMountinfo =
    "22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
    "24 23 0:22 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683620k\n"
    "29 24 0:26 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683620k,huge=within_size\n"
    "30 22 0:27 / /dev/shmother rw - tmpfs tmpfs rw,huge=always\n";

HugePageFacts Tmpfs(std::string options, std::string shmem_enabled = "always within_size "
                                                                      "[advise] never deny force") {
  return {kTmpfsMagic, 4096, std::move(options), std::move(shmem_enabled)};
}

TEST(HugePages, TheLastMountOnAPointHidesTheEarlierOneAndSiblingsDoNotMatch) {
  EXPECT_EQ(MountOptionsOf(kMountinfo, "/dev/shm"), "rw,size=24683620k,huge=within_size");
  EXPECT_EQ(MountOptionsOf(kMountinfo, "/dev/shm/sub"), "rw,size=24683620k,huge=within_size");
  EXPECT_EQ(MountOptionsOf(kMountinfo, "/var/tmp"), "rw,lowerdir=/l,upperdir=/u,workdir=/w");
}

TEST(HugePages, TmpfsMountOptionsDecide) {
  auto within = PlanHugePages(HugePageMode::kAuto, "/dev/shm", Tmpfs("rw,huge=within_size"));
  ASSERT_TRUE(within.ok());
  EXPECT_TRUE(within->huge);
  EXPECT_FALSE(within->advise);
  auto advise = PlanHugePages(HugePageMode::kAuto, "/dev/shm", Tmpfs("rw,huge=advise"));
  ASSERT_TRUE(advise.ok());
  EXPECT_TRUE(advise->huge && advise->advise);
  auto advise_off = PlanHugePages(HugePageMode::kOff, "/dev/shm", Tmpfs("rw,huge=advise"));
  ASSERT_TRUE(advise_off.ok());
  EXPECT_FALSE(advise_off->huge || advise_off->advise);
  auto never = PlanHugePages(HugePageMode::kAuto, "/dev/shm", Tmpfs("rw,size=8g"));
  ASSERT_TRUE(never.ok());
  EXPECT_FALSE(never->huge);
  EXPECT_NE(never->how.find("huge=never"), std::string::npos) << never->how;
}

TEST(HugePages, TheKernelsForceAndDenyOverrideTheMount) {
  auto forced = PlanHugePages(HugePageMode::kAuto, "/dev/shm",
                              Tmpfs("rw", "always within_size advise never deny [force]"));
  ASSERT_TRUE(forced.ok());
  EXPECT_TRUE(forced->huge);
  auto denied = PlanHugePages(HugePageMode::kAuto, "/dev/shm",
                              Tmpfs("rw,huge=always", "always within_size advise never [deny] force"));
  ASSERT_TRUE(denied.ok());
  EXPECT_FALSE(denied->huge);
}

TEST(HugePages, HugetlbfsIsAlwaysHugeAndSizesThePool) {
  auto plan = PlanHugePages(HugePageMode::kOn, "/dev/shm",
                            {kHugetlbfsMagic, 2u << 20, "rw,pagesize=2M", ""});
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->huge);
  EXPECT_FALSE(plan->advise);
  EXPECT_EQ(plan->page_bytes, 2u << 20);
}

TEST(HugePages, OnWithoutHugePagesRefusesNamingTheFix) {
  auto plan = PlanHugePages(HugePageMode::kOn, "/dev/shm", Tmpfs("rw,size=8g"));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kInvalidConfig);
  EXPECT_NE(plan.status().message().find("huge=within_size"), std::string::npos);
  EXPECT_NE(plan.status().message().find("HugePages-2Mi"), std::string::npos);
  EXPECT_FALSE(ParseHugePageMode("yes").ok());
}

TEST(HugePages, ThisMachinesDevShmIsReadAndPlanned) {
  auto facts = ReadHugePageFacts("/dev/shm");
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_TRUE(facts->fs_magic == kTmpfsMagic || facts->fs_magic == kHugetlbfsMagic);
  auto plan = PlanHugePages(HugePageMode::kAuto, "/dev/shm", *facts);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->how.empty());
}

TEST(HugePages, HugeMappedBytesReadsTheMappingsOwnEntry) {
  // A 4 KiB-page segment, written through: none of it is huge, and the
  // lookup finds the mapping (a wrong header match would read another's).
  const std::string name = "lmcache_l1_pool_hugetest_" + std::to_string(getpid());
  auto segment = ShmSegment::Create({name, 8u << 20, "/dev/shm", true, false});
  ASSERT_TRUE(segment.ok());
  std::memset((*segment)->base(), 1, 8u << 20);
  auto facts = ReadHugePageFacts("/dev/shm");
  ASSERT_TRUE(facts.ok());
  auto plan = PlanHugePages(HugePageMode::kAuto, "/dev/shm", *facts);
  ASSERT_TRUE(plan.ok());
  if (plan->huge && !plan->advise) {
    EXPECT_GT(HugeMappedBytes((*segment)->base()), 0u);
  } else {
    EXPECT_EQ(HugeMappedBytes((*segment)->base()), 0u);
  }
}

}  // namespace
}  // namespace lmcache::shm
