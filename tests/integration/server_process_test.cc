// Runs the real lmcache-server binary: startup, the pool segment, readiness,
// shutdown on SIGTERM/SIGINT, and the fail-fast paths.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> args) {
    log_path_ = std::filesystem::temp_directory_path() /
                ("lmcache_server_test_" + std::to_string(getpid()) + "_" +
                 std::to_string(counter_++) + ".log");
    std::vector<std::string> argv_storage{LMC_SERVER_BINARY};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(log_path_);
  }
  pid_t pid() const { return pid_; }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream out;
    out << in.rdbuf();
    return out.str();
  }
  bool WaitForLog(const std::string& text, std::chrono::seconds timeout) const {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (Log().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Exit code, or -1 if it did not exit in time.
  int WaitExit(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::filesystem::path log_path_;
};

void StartsServesAndCleansUpOn(int signal_number) {
  ServerProcess server({"--l1-size-gb", "1"});
  ASSERT_TRUE(server.WaitForLog("ready", std::chrono::seconds(60))) << server.Log();
  const std::string path = "/dev/shm/lmcache_l1_pool_" + std::to_string(server.pid());
  struct stat info {};
  ASSERT_EQ(stat(path.c_str(), &info), 0) << path;
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<std::uint64_t>(info.st_size), 1ull << 30);
  EXPECT_NE(server.Log().find("pre-faulted"), std::string::npos) << server.Log();
  EXPECT_NE(server.Log().find("GiB/s"), std::string::npos);
  ASSERT_EQ(kill(server.pid(), signal_number), 0);
  EXPECT_EQ(server.WaitExit(std::chrono::seconds(30)), 0) << server.Log();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ServerProcess, StartsWithOneGibPoolAndRemovesItOnSigterm) { StartsServesAndCleansUpOn(SIGTERM); }

TEST(ServerProcess, RemovesItsPoolOnSigint) { StartsServesAndCleansUpOn(SIGINT); }

TEST(ServerProcess, OversizedPoolFailsFastNamingShmSize) {
  const auto start = Clock::now();
  ServerProcess server({"--l1-size-gb", "100000"});
  const int code = server.WaitExit(std::chrono::seconds(10));
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "still running after 10 s";
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  const std::string log = server.Log();
  EXPECT_NE(log.find("--shm-size"), std::string::npos) << log;
  EXPECT_NE(log.find("GiB free"), std::string::npos) << log;
  EXPECT_NE(log.find("emptyDir"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/lmcache_l1_pool_" + std::to_string(server.pid())));
}

TEST(ServerProcess, InvalidFlagIsRefusedWithItsName) {
  ServerProcess server({"--l1-size-gb", "1", "--eviction-trigger-watermark", "1.5"});
  EXPECT_EQ(server.WaitExit(std::chrono::seconds(10)), 2);
  EXPECT_NE(server.Log().find("--eviction-trigger-watermark"), std::string::npos) << server.Log();
}

TEST(ServerProcess, RemovesSegmentOfACrashedServer) {
  ServerProcess crashed({"--l1-size-gb", "0.25"});
  ASSERT_TRUE(crashed.WaitForLog("ready", std::chrono::seconds(60))) << crashed.Log();
  const std::string stale = "/dev/shm/lmcache_l1_pool_" + std::to_string(crashed.pid());
  kill(crashed.pid(), SIGKILL);
  crashed.WaitExit(std::chrono::seconds(10));
  ASSERT_TRUE(std::filesystem::exists(stale));  // SIGKILL leaves it behind

  ServerProcess next({"--l1-size-gb", "0.25"});
  ASSERT_TRUE(next.WaitForLog("ready", std::chrono::seconds(60))) << next.Log();
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_NE(next.Log().find("removed stale segment"), std::string::npos) << next.Log();
  kill(next.pid(), SIGTERM);
  EXPECT_EQ(next.WaitExit(std::chrono::seconds(30)), 0);
}

TEST(ServerProcess, HelpDocumentsFlagsWithDefaults) {
  ServerProcess server({"--help"});
  EXPECT_EQ(server.WaitExit(std::chrono::seconds(10)), 0);
  const std::string log = server.Log();
  for (const char* flag : {"--l1-size-gb", "--shm-name", "--l1-align-bytes", "--l1-write-ttl-seconds",
                           "--l1-read-ttl-seconds", "--eviction-policy",
                           "--eviction-trigger-watermark", "--eviction-ratio", "--log-level"}) {
    EXPECT_NE(log.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(log.find("=600"), std::string::npos);
  EXPECT_NE(log.find("GiB"), std::string::npos);
}

}  // namespace
