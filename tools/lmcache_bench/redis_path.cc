// Redis as the KV store users would otherwise deploy: a redis-server started
// here on a unix socket with persistence off; each worker SETs and GETs the
// same chunks through hiredis, one pipeline per prompt.
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "paths.h"
#include "phased_workers.h"

namespace lmcache::bench {
namespace {

struct RedisFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using RedisConnection = std::unique_ptr<redisContext, RedisFree>;
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

Result<RedisConnection> Connect(const std::string& socket_path) {
  RedisConnection connection(redisConnectUnix(socket_path.c_str()));
  if (!connection || connection->err != 0) {
    return Status(ErrorCode::kUnavailable, "redis at " + socket_path + ": " +
                                               (connection ? connection->errstr : "no memory"));
  }
  return connection;
}

Status Command(redisContext* c, std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  RedisReplyPtr reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data())));
  if (!reply || reply->type == REDIS_REPLY_ERROR) {
    return Status(ErrorCode::kIoError, std::string("redis: ") + (reply ? reply->str : c->errstr));
  }
  return Status::Ok();
}

struct RedisWorker {
  RedisConnection connection;
  PromptBuffers buffers;
};

std::string ChunkKey(int w, int p, std::uint64_t c) {
  return "bench:" + std::to_string(w) + ":" + std::to_string(p) + ":" + std::to_string(c);
}

}  // namespace

Result<std::unique_ptr<BenchPath>> StartRedisPath(const BenchOptions& o) {
  if (!std::filesystem::exists(o.redis_binary)) {
    return Status(ErrorCode::kNotFound, o.redis_binary + " not found: install redis-server");
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lmcache_bench_redis_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string socket_path = (dir / "redis.sock").string();
  const pid_t server = fork();
  if (server < 0) return Status(ErrorCode::kIoError, "fork failed");
  if (server == 0) {
    // Its log goes to a file beside the socket (printed if the server fails).
    const std::string log = (dir / "redis.log").string();
    if (FILE* f = std::fopen(log.c_str(), "w")) {
      dup2(fileno(f), STDOUT_FILENO);
      dup2(fileno(f), STDERR_FILENO);
    }
    // Persistence off, no TCP; values of one chunk fit the default limits.
    execl(o.redis_binary.c_str(), o.redis_binary.c_str(), "--port", "0", "--unixsocket",
          socket_path.c_str(), "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
          "--dir", dir.c_str(), "--loglevel", "warning", "--logfile", "", nullptr);
    _exit(127);
  }
  auto stop_server = [server, dir] {
    kill(server, SIGTERM);
    waitpid(server, nullptr, 0);
    std::filesystem::remove_all(dir);
  };
  RedisConnection admin;
  for (int i = 0; i < 500 && !admin; ++i) {  // up to 5 s for redis to listen
    if (auto c = Connect(socket_path); c.ok() && Command(c->get(), {"PING"}).ok()) {
      admin = std::move(c).value();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (!admin) {
    std::ifstream log(dir / "redis.log");
    std::stringstream text_stream;
    text_stream << log.rdbuf();
    const std::string text = text_stream.str();
    stop_server();
    return Status(ErrorCode::kUnavailable,
                  "redis-server did not start on " + socket_path + ": " + text);
  }

  auto state = std::make_shared<RedisWorker>();
  auto setup = [&o, &socket_path, state](int w) -> Status {
    LMC_ASSIGN_OR_RETURN(state->connection, Connect(socket_path));
    state->buffers = MakePromptBuffers(o, w);
    return Status::Ok();
  };
  auto store = [&o, state](int w) -> Status {
    redisContext* c = state->connection.get();
    for (int p = 0; p < o.prompts_per_worker; ++p) {
      for (std::uint64_t chunk = 0; chunk < o.chunks_per_prompt(); ++chunk) {
        const std::string key = ChunkKey(w, p, chunk);
        const char* argv[] = {"SET", key.data(),
                              reinterpret_cast<const char*>(state->buffers.data[p].data() +
                                                            chunk * o.object_bytes())};
        const std::size_t lengths[] = {3, key.size(), o.object_bytes()};
        if (redisAppendCommandArgv(c, 3, argv, lengths) != REDIS_OK) return Internal(c->errstr);
      }
      for (std::uint64_t chunk = 0; chunk < o.chunks_per_prompt(); ++chunk) {
        void* raw = nullptr;
        if (redisGetReply(c, &raw) != REDIS_OK) return Internal(c->errstr);
        RedisReplyPtr reply(static_cast<redisReply*>(raw));
        if (reply->type == REDIS_REPLY_ERROR) return Internal(reply->str);
      }
    }
    return Status::Ok();
  };
  auto retrieve = [&o, state](int w) -> Status {
    redisContext* c = state->connection.get();
    for (int p = 0; p < o.prompts_per_worker; ++p) {
      for (std::uint64_t chunk = 0; chunk < o.chunks_per_prompt(); ++chunk) {
        const std::string key = ChunkKey(w, p, chunk);
        const char* argv[] = {"GET", key.data()};
        const std::size_t lengths[] = {3, key.size()};
        if (redisAppendCommandArgv(c, 2, argv, lengths) != REDIS_OK) return Internal(c->errstr);
      }
      for (std::uint64_t chunk = 0; chunk < o.chunks_per_prompt(); ++chunk) {
        void* raw = nullptr;
        if (redisGetReply(c, &raw) != REDIS_OK) return Internal(c->errstr);
        RedisReplyPtr reply(static_cast<redisReply*>(raw));
        if (reply->type != REDIS_REPLY_STRING ||
            static_cast<std::uint64_t>(reply->len) != o.object_bytes()) {
          return Internal("redis returned no chunk");
        }
        std::memcpy(state->buffers.out[p].data() + chunk * o.object_bytes(), reply->str,
                    reply->len);
      }
    }
    return Status::Ok();
  };
  auto verify = [state](int) { return state->buffers.Verify(); };
  auto workers = PhasedWorkers::Start(o.workers, setup, {store, retrieve, verify});
  if (!workers.ok()) {
    stop_server();
    return workers.status();
  }
  std::shared_ptr<redisContext> shared_admin(admin.release(), RedisFree{});
  auto flush = [shared_admin] { return Command(shared_admin.get(), {"FLUSHALL"}); };
  auto stop = [shared_admin, stop_server]() mutable {
    shared_admin.reset();
    stop_server();
  };
  return std::unique_ptr<BenchPath>(
      std::make_unique<PhasedPath>(o, std::move(workers).value(), flush, stop));
}

}  // namespace lmcache::bench
