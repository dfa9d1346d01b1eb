// RedisProcess: a real redis-server (Debian's) for a test, on a unix socket
// in a temporary directory, with no persistence; SIGKILLed and its directory
// removed when the object dies. Available() says whether redis-server is
// installed, so tests skip with a clear message where it is not.
// Thread-safety: one test thread.
#pragma once

#include <hiredis/hiredis.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace lmcache::testing {

class RedisProcess {
 public:
  static constexpr const char* kBinary = "/usr/bin/redis-server";
  static bool Available() { return ::access(kBinary, X_OK) == 0; }

  // Starts on a unix socket; `port` > 0 also listens on 127.0.0.1:port.
  explicit RedisProcess(int port = 0, std::vector<std::string> extra = {}) {
    static int counter = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("lmcache_redis_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
    socket_ = (dir_ / "redis.sock").string();
    port_ = port;
    Start(extra);
  }
  ~RedisProcess() {
    Kill();
    std::filesystem::remove_all(dir_);
  }

  void Start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{kBinary,      "--port",        std::to_string(port_),
                                  "--bind",     "127.0.0.1",     "--unixsocket",
                                  socket_,      "--unixsocketperm", "700",
                                  "--save",     "",              "--appendonly",
                                  "no",         "--dir",         dir_.string(),
                                  "--logfile",  (dir_ / "redis.log").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline && !Ping()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  bool Ping() const {
    // Any answer (PONG, or NOAUTH with a password set) means it serves.
    redisReply* reply = Command({"PING"});
    const bool ok = reply != nullptr;
    if (reply != nullptr) freeReplyObject(reply);
    return ok;
  }
  // One command on a fresh connection; nullptr when it could not be sent.
  // The caller frees the reply with freeReplyObject.
  redisReply* Command(const std::vector<std::string>& args) const { return Commands({args}); }
  // Commands in order on one fresh connection (AUTH, SELECT, then a query);
  // the last one's reply.
  redisReply* Commands(const std::vector<std::vector<std::string>>& commands) const {
    redisContext* c = redisConnectUnix(socket_.c_str());
    if (c == nullptr || c->err != 0) {
      if (c != nullptr) redisFree(c);
      return nullptr;
    }
    redisReply* reply = nullptr;
    for (const auto& args : commands) {
      if (reply != nullptr) freeReplyObject(reply);
      std::vector<const char*> argv;
      std::vector<std::size_t> lengths;
      for (const auto& a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
      }
      reply = static_cast<redisReply*>(
          redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lengths.data()));
      if (reply == nullptr) break;
    }
    redisFree(c);
    return reply;
  }
  const std::string& socket_path() const { return socket_; }
  std::string unix_url() const { return "unix://" + socket_; }
  std::string tcp_url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  std::filesystem::path dir_;
  std::string socket_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace lmcache::testing
