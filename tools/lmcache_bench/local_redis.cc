#include "local_redis.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace lmcache::bench {
namespace {

bool Pings(const std::string& socket_path) {
  redisContext* c = redisConnectUnix(socket_path.c_str());
  bool ok = false;
  if (c != nullptr && c->err == 0) {
    auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
    ok = reply != nullptr && reply->type == REDIS_REPLY_STATUS;
    if (reply != nullptr) freeReplyObject(reply);
  }
  if (c != nullptr) redisFree(c);
  return ok;
}

}  // namespace

Result<std::unique_ptr<LocalRedis>> LocalRedis::Start(const std::string& binary,
                                                      const std::string& tag,
                                                      int tcp_port) {
  if (!std::filesystem::exists(binary)) {
    return Status(ErrorCode::kNotFound, binary + " not found: install redis-server");
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (tag + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string socket_path = (dir / "redis.sock").string();
  const pid_t pid = fork();
  if (pid < 0) return Status(ErrorCode::kIoError, "fork failed");
  if (pid == 0) {
    // Its log goes to a file beside the socket (printed if the server fails).
    const std::string log = (dir / "redis.log").string();
    if (FILE* f = std::fopen(log.c_str(), "w")) {
      dup2(fileno(f), STDOUT_FILENO);
      dup2(fileno(f), STDERR_FILENO);
    }
    // Persistence off, TCP only on loopback where asked; values of one
    // chunk fit the default limits.
    const std::string port = std::to_string(tcp_port);
    execl(binary.c_str(), binary.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1",
          "--unixsocket", socket_path.c_str(),
          "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", dir.c_str(),
          "--loglevel", "warning", "--logfile", "", nullptr);
    _exit(127);
  }
  std::unique_ptr<LocalRedis> redis(new LocalRedis(pid, dir.string(), socket_path));
  for (int i = 0; i < 500; ++i) {  // up to 5 s for redis to listen
    if (Pings(socket_path)) return redis;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream log(dir / "redis.log");
  std::stringstream text;
  text << log.rdbuf();
  return Status(ErrorCode::kUnavailable,
                "redis-server did not start on " + socket_path + ": " + text.str());
}

LocalRedis::~LocalRedis() {
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  std::filesystem::remove_all(dir_);
}

}  // namespace lmcache::bench
