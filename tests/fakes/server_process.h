// ServerProcess: runs the real lmcache-server binary for a test, with its
// output captured in a temporary log file; killed (SIGKILL) if still running
// when the object dies. LMC_SERVER_BINARY names the binary (a compile definition).
// Thread-safety: one test thread.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace lmcache::testing {

using SteadyTime = std::chrono::steady_clock;

class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> args) {
    log_path_ = std::filesystem::temp_directory_path() /
                ("lmcache_server_test_" + std::to_string(getpid()) + "_" +
                 std::to_string(counter_++) + ".log");
    std::vector<std::string> argv_storage{LMC_SERVER_BINARY};
    // No HTTP endpoint unless the test asks for one: tests run side by side.
    if (std::find(args.begin(), args.end(), "--http-port") == args.end()) {
      argv_storage.insert(argv_storage.end(), {"--http-port", "0"});
    }
    // SIGTERM exits at once unless the caller tests the drain.
    if (std::find(args.begin(), args.end(), "--drain-timeout-seconds") == args.end()) {
      argv_storage.insert(argv_storage.end(), {"--drain-timeout-seconds", "0"});
    }
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
    const auto deadline = SteadyTime::now() + timeout;
    while (SteadyTime::now() < deadline) {
      if (Log().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Exit code, or -1 if it did not exit in time.
  int WaitExit(std::chrono::seconds timeout) {
    const auto deadline = SteadyTime::now() + timeout;
    while (SteadyTime::now() < deadline) {
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

}  // namespace lmcache::testing
