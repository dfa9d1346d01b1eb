// Redis as the KV store users would otherwise deploy: a redis-server started
// here on a unix socket with persistence off; each worker SETs and GETs the
// same chunks through hiredis, one pipeline per prompt.
#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "local_redis.h"
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
  LMC_ASSIGN_OR_RETURN(std::shared_ptr<LocalRedis> redis,
                       LocalRedis::Start(o.redis_binary, "lmcache_bench_redis"));
  const std::string socket_path = redis->socket_path();
  LMC_ASSIGN_OR_RETURN(RedisConnection admin, Connect(socket_path));
  auto stop_server = [redis]() mutable { redis.reset(); };
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
