#include "shm/shm_segment.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "alloc/slab_allocator.h"

namespace lmcache::shm {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

std::string TestName(const char* tag) {
  return "lmcache_l1_pool_test_" + std::string(tag) + "_" + std::to_string(getpid());
}

TEST(ShmSegment, CreateMakesA0600SegmentOfTheSizeAndUnlinksOnDestruction) {
  const std::string name = TestName("create");
  const std::string path = "/dev/shm/" + name;
  {
    auto segment = ShmSegment::Create({name, 8 * kMiB});
    ASSERT_TRUE(segment.ok()) << segment.status().ToString();
    struct stat info {};
    ASSERT_EQ(stat(path.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0600u);
    EXPECT_EQ(static_cast<std::uint64_t>(info.st_size), 8 * kMiB);
    EXPECT_EQ((*segment)->size(), 8 * kMiB);
    EXPECT_TRUE((*segment)->owner());
    const PrefaultReport report = (*segment)->Prefault(2);
    EXPECT_GE(report.seconds, 0.0);
    EXPECT_EQ(report.threads, 2u);
    std::memset((*segment)->base(), 0xab, 8 * kMiB);  // every byte writable, no SIGBUS
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ShmSegment, StaleSegmentOfTheSameNameIsReplaced) {
  // A crashed server's leftover: the segment exists, nobody holds its lock.
  const std::string name = TestName("stale");
  {
    const int fd = shm_open(("/" + name).c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 4 * kMiB), 0);
    close(fd);
  }
  auto fresh = ShmSegment::Create({name, 6 * kMiB});
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(std::filesystem::file_size("/dev/shm/" + name), 6 * kMiB);
}

TEST(ShmSegment, ALiveSegmentOfTheSameNameIsRefusedNamingItsOwner) {
  const std::string name = TestName("live");
  auto live = ShmSegment::Create({name, 4 * kMiB});
  ASSERT_TRUE(live.ok());
  auto second = ShmSegment::Create({name, 6 * kMiB});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid())), std::string::npos)
      << second.status().message();
  EXPECT_EQ(std::filesystem::file_size("/dev/shm/" + name), 4 * kMiB);  // untouched
  // A client attaching to it (and going away) does not release the owner's lock.
  { auto attached = ShmSegment::Attach(name, 4 * kMiB); }
  EXPECT_FALSE(ShmSegment::Create({name, 6 * kMiB}).ok());
}

TEST(ShmSegment, TooLargeFailsFastWithTheFix) {
  auto segment = ShmSegment::Create({TestName("huge"), 1ull << 50});
  ASSERT_FALSE(segment.ok());
  EXPECT_EQ(segment.status().code(), ErrorCode::kShmTooSmall);
  EXPECT_NE(segment.status().message().find("--shm-size="), std::string::npos);
  EXPECT_NE(segment.status().message().find("medium: Memory"), std::string::npos);
  EXPECT_NE(segment.status().message().find("GiB free"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + TestName("huge")));
}

TEST(ShmSegment, AttachChecksSizeAndNeverUnlinks) {
  const std::string name = TestName("attach");
  auto server = ShmSegment::Create({name, 4 * kMiB});
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(ShmSegment::Attach(name, 8 * kMiB).status().code(), ErrorCode::kLayoutMismatch);
  EXPECT_EQ(ShmSegment::Attach(TestName("missing"), 0).status().code(), ErrorCode::kNotFound);
  {
    auto client = ShmSegment::Attach(name, 4 * kMiB);
    ASSERT_TRUE(client.ok());
    EXPECT_FALSE((*client)->owner());
    EXPECT_EQ((*client)->Unlink().code(), ErrorCode::kWrongState);
  }
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + name));
}

// The cross-process contract: a child attaches by name, writes a pattern at an
// offset the server's allocator handed out, and the parent reads it back.
TEST(ShmSegmentMultiProcess, ChildWritesAtAllocatedOffsetParentReads) {
  const std::string name = TestName("mp");
  auto segment = ShmSegment::Create({name, 16 * kMiB});
  ASSERT_TRUE(segment.ok());
  auto allocator = alloc::SlabAllocator::Create((*segment)->bytes(), {});
  ASSERT_TRUE(allocator.ok());
  auto offsets = (*allocator)->AllocateBatch(1 * kMiB, 3);
  ASSERT_TRUE(offsets.ok());
  const alloc::Offset target = (*offsets)[2];

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto attached = ShmSegment::Attach(name, 16 * kMiB);
    if (!attached.ok()) _exit(10);
    std::byte* p = (*attached)->base() + target;
    for (std::uint64_t i = 0; i < kMiB; ++i) p[i] = static_cast<std::byte>((i * 31 + 7) & 0xff);
    _exit(0);  // no unlink: the segment belongs to the parent
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const std::byte* p = *(*allocator)->Resolve(target, kMiB);
  for (std::uint64_t i = 0; i < kMiB; ++i) {
    ASSERT_EQ(p[i], static_cast<std::byte>((i * 31 + 7) & 0xff)) << "at byte " << i;
  }
  const std::byte* neighbour = *(*allocator)->Resolve((*offsets)[1], kMiB);
  EXPECT_EQ(neighbour[kMiB - 1], std::byte{0});  // the child stayed inside its object
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + name));
}

}  // namespace
}  // namespace lmcache::shm
