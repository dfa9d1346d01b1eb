#include "shm/shm_name.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

namespace lmcache::shm {
namespace {

TEST(ShmName, DefaultCarriesThePid) {
  EXPECT_EQ(*NormalizePoolName("", 1234), "lmcache_l1_pool_1234");
}

TEST(ShmName, NormalisesLikeTheReference) {
  EXPECT_EQ(*NormalizePoolName("/mypool", 1), "lmcache_l1_pool_mypool");
  EXPECT_EQ(*NormalizePoolName("lmcache_l1_pool_x", 1), "lmcache_l1_pool_x");
  EXPECT_EQ(*NormalizePoolName("//lmcache_l1_pool_y", 1), "lmcache_l1_pool_y");
}

TEST(ShmName, RejectsBadNames) {
  EXPECT_FALSE(NormalizePoolName("/", 1).ok());
  EXPECT_FALSE(NormalizePoolName("a/b", 1).ok());
  EXPECT_FALSE(NormalizePoolName("a\\b", 1).ok());
  EXPECT_FALSE(NormalizePoolName(std::string(300, 'a'), 1).ok());
}

TEST(ShmName, PidOfDefaultName) {
  EXPECT_EQ(PidOfDefaultName("lmcache_l1_pool_42"), 42);
  EXPECT_EQ(PidOfDefaultName("lmcache_l1_pool_mypool"), -1);
  EXPECT_EQ(PidOfDefaultName("lmcache_l1_pool_"), -1);
  EXPECT_EQ(PidOfDefaultName("other_42"), -1);
}

void MakeSegment(const std::string& name) {
  const int fd = shm_open(("/" + name).c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
}

TEST(ShmName, RemovesOnlySegmentsOfDeadServers) {
  // A pid that surely exited: a child we reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  const std::string dead = "lmcache_l1_pool_" + std::to_string(child);
  const std::string alive = "lmcache_l1_pool_" + std::to_string(getpid());
  const std::string custom = "lmcache_l1_pool_custom_test";
  MakeSegment(dead);
  MakeSegment(alive);
  MakeSegment(custom);
  const auto removed = RemoveOrphanedPoolSegments();
  EXPECT_NE(std::find(removed.begin(), removed.end(), dead), removed.end());
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + dead));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + alive));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + custom));
  shm_unlink(("/" + alive).c_str());
  shm_unlink(("/" + custom).c_str());
}

}  // namespace
}  // namespace lmcache::shm
