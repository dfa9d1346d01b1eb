// The L2 phases of lmcache-bench (l2_phase.h).
#include "l2_phase.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "lmcache/client.h"
#include "phase_support.h"
#if LMC_L2_S3
#include <condition_variable>
#include <mutex>

#include "tier/s3/s3_client.h"
#endif
#include "support/local_server.h"
#include "support/server_stats.h"

namespace lmcache::bench {
namespace {

Status Errno(const std::string& what) {
  return Status(ErrorCode::kIoError, what + ": " + std::strerror(errno));
}

class DiskReference final : public L2Reference {
 public:
  explicit DiskReference(std::string dir) : path_(std::move(dir) + "/reference.bin") {}
  ~DiskReference() override { ::unlink(path_.c_str()); }

  Result<double> Write(const std::vector<std::span<const std::byte>>& objects) override {
    const auto start = SteadyTime::now();
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0) return Errno("open " + path_);
    std::uint64_t bytes = 0;
    for (const auto& object : objects) {
      if (::write(fd, object.data(), object.size()) != static_cast<ssize_t>(object.size())) {
        ::close(fd);
        return Errno("write " + path_);
      }
      bytes += object.size();
    }
    const bool synced = ::fdatasync(fd) == 0;
    ::close(fd);
    if (!synced) return Errno("fdatasync " + path_);
    return static_cast<double>(bytes) / Seconds(start) / 1e9;
  }

  Result<double> Read(const std::vector<std::span<std::byte>>& objects) override {
    const auto start = SteadyTime::now();
    const int fd = ::open(path_.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) return Errno("open " + path_);
    std::uint64_t bytes = 0;
    for (const auto& object : objects) {
      if (::read(fd, object.data(), object.size()) != static_cast<ssize_t>(object.size())) {
        ::close(fd);
        return Errno("read " + path_);
      }
      bytes += object.size();
    }
    ::close(fd);
    return static_cast<double>(bytes) / Seconds(start) / 1e9;
  }

 private:
  std::string path_;
};

// Raw SET and GET of the same values through hiredis, pipelined as the resp
// adapter pipelines (16 commands at a time), on the same Redis: what the
// adapter adds (header, checksum, routing, the server's write-behind and
// prefetch) is the difference. Every round writes new keys, as the adapter
// does (its rounds store new prompts): overwriting the same keys let Redis
// reuse the memory it had just freed, while the adapter's SETs made Redis
// take and fault in new memory, and the ratio measured that difference.
class RawRedisReference final : public L2Reference {
 public:
  explicit RawRedisReference(std::string socket_path) : socket_path_(std::move(socket_path)) {}

  Result<double> Write(const std::vector<std::span<const std::byte>>& objects) override {
    generation_ += 1;
    return Pipelined(
        objects.size(), TotalBytes(objects),
        [&](redisContext* c, std::size_t i) {
          const std::string key = KeyOf(i);
          const char* argv[] = {"SET", key.data(),
                                reinterpret_cast<const char*>(objects[i].data())};
          const std::size_t lengths[] = {3, key.size(), objects[i].size()};
          redisAppendCommandArgv(c, 3, argv, lengths);
        },
        [](const redisReply& reply, std::size_t) { return reply.type == REDIS_REPLY_STATUS; });
  }

  Result<double> Read(const std::vector<std::span<std::byte>>& objects) override {
    return Pipelined(
        objects.size(), TotalBytes(objects),
        [&](redisContext* c, std::size_t i) {
          const std::string key = KeyOf(i);
          const char* argv[] = {"GET", key.data()};
          const std::size_t lengths[] = {3, key.size()};
          redisAppendCommandArgv(c, 2, argv, lengths);
        },
        [&](const redisReply& reply, std::size_t i) {
          if (reply.type != REDIS_REPLY_STRING || reply.len != objects[i].size()) return false;
          std::memcpy(objects[i].data(), reply.str, reply.len);
          return true;
        });
  }

 private:
  static constexpr std::size_t kDepth = 16;
  std::string KeyOf(std::size_t i) const {
    return "raw:" + std::to_string(generation_) + ":" + std::to_string(i);
  }
  struct ContextFree {
    void operator()(redisContext* c) const { redisFree(c); }
  };

  template <typename Span>
  static std::uint64_t TotalBytes(const std::vector<Span>& objects) {
    std::uint64_t bytes = 0;
    for (const auto& o : objects) bytes += o.size();
    return bytes;
  }

  // Queues commands 0..count-1 (`append`) kDepth at a time on a fresh
  // connection and hands each reply to `take` (false: an unexpected reply);
  // the GB/s of `bytes` moved.
  template <typename Append, typename Take>
  Result<double> Pipelined(std::size_t count, std::uint64_t bytes, Append append, Take take) {
    std::unique_ptr<redisContext, ContextFree> c(redisConnectUnix(socket_path_.c_str()));
    if (!c || c->err != 0) return Status(ErrorCode::kUnavailable, "redis at " + socket_path_);
    const auto start = SteadyTime::now();
    for (std::size_t begin = 0; begin < count; begin += kDepth) {
      const std::size_t end = std::min(count, begin + kDepth);
      for (std::size_t i = begin; i < end; ++i) append(c.get(), i);
      for (std::size_t i = begin; i < end; ++i) {
        void* raw = nullptr;
        if (redisGetReply(c.get(), &raw) != REDIS_OK || raw == nullptr) {
          return Status(ErrorCode::kIoError, std::string("redis: ") + c->errstr);
        }
        std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(static_cast<redisReply*>(raw),
                                                                      &freeReplyObject);
        if (!take(*reply, i))
          return Status(ErrorCode::kIoError, "redis answered an unexpected reply");
      }
    }
    return static_cast<double>(bytes) / Seconds(start) / 1e9;
  }

  std::string socket_path_;
  std::uint64_t generation_ = 0;  // of the last Write: Read reads its keys
};

// A phase's server: a pool twice one round (at least 1 GiB), quiet logs, `extra`.
// An object takes at least one 4 KiB slot (--l1-align-bytes): at chunk size 1
// a 1 KiB object takes four times its bytes, and a pool sized by bytes alone
// evicted a round's objects before they were written behind.
std::vector<std::string> PhaseServerArgs(const BenchOptions& o, std::uint64_t round_objects,
                                         const std::vector<std::string>& extra) {
  constexpr std::uint64_t kSlotBytes = 4096;
  const std::uint64_t slot_bytes = (o.object_bytes() + kSlotBytes - 1) / kSlotBytes * kSlotBytes;
  const double pool_gb =
      std::max(1.0, 2.0 * static_cast<double>(round_objects * slot_bytes) / (1 << 30));
  // A round's objects all wait for L2 at once (at --chunk-size 1, one per token).
  const std::uint64_t queue_objects = std::max<std::uint64_t>(65536, 2 * round_objects);
  std::vector<std::string> args = {"--l1-size-gb",
                                   std::to_string(pool_gb),
                                   "--log-level",
                                   "warn",
                                   "--chunk-size",
                                   std::to_string(o.chunk_size),
                                   "--l2-store-queue-objects",
                                   std::to_string(queue_objects)};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

std::unique_ptr<L2Reference> MakeDiskReference(const std::string& dir) {
  return std::make_unique<DiskReference>(dir);
}

std::unique_ptr<L2Reference> MakeRawRedisReference(const std::string& socket_path) {
  return std::make_unique<RawRedisReference>(socket_path);
}

#if LMC_L2_S3
namespace {

class RawS3Reference final : public L2Reference {
 public:
  explicit RawS3Reference(std::unique_ptr<tier::S3Client> client) : client_(std::move(client)) {}

  Result<double> Write(const std::vector<std::span<const std::byte>>& objects) override {
    return Run(objects.size(), TotalBytes(objects), [&](std::size_t i, tier::S3Call* call) {
      call->method = tier::S3Method::kPut;
      call->body = {objects[i]};
    });
  }

  Result<double> Read(const std::vector<std::span<std::byte>>& objects) override {
    return Run(objects.size(), TotalBytes(objects), [&](std::size_t i, tier::S3Call* call) {
      call->method = tier::S3Method::kGet;
      call->sink = [out = objects[i]](std::uint64_t offset, std::int64_t,
                                      std::span<const std::byte> piece) {
        if (offset + piece.size() > out.size()) return false;
        std::memcpy(out.data() + offset, piece.data(), piece.size());
        return true;
      };
    });
  }

 private:
  template <typename Spans>
  static std::uint64_t TotalBytes(const Spans& objects) {
    std::uint64_t total = 0;
    for (const auto& object : objects) total += object.size();
    return total;
  }

  // Every object's call in flight at once; GB/s of the objects' `bytes`.
  template <typename Fill>
  Result<double> Run(std::size_t count, std::uint64_t bytes, const Fill& fill) {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t left = count;
    std::string error;
    const auto start = SteadyTime::now();
    for (std::size_t i = 0; i < count; ++i) {
      tier::S3Call call;
      call.object = "bench-raw/" + std::to_string(i);
      fill(i, &call);
      call.done = [&](tier::S3Response r) {
        std::lock_guard lock(mu);
        if (!r.ok() && error.empty()) {
          error = r.error.ok() ? "HTTP " + std::to_string(r.http_status) : r.error.message();
        }
        if (--left == 0) cv.notify_one();
      };
      client_->Submit(std::move(call));
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return left == 0; });
    if (!error.empty()) return Status(ErrorCode::kIoError, "raw S3 reference: " + error);
    return static_cast<double>(bytes) / Seconds(start) / 1e9;
  }

  std::unique_ptr<tier::S3Client> client_;
};

}  // namespace
#endif

Result<std::unique_ptr<L2Reference>> MakeRawS3Reference(const S3Target& target) {
#if LMC_L2_S3
  tier::S3ClientConfig config;
  const std::size_t colon = target.endpoint.find("://");
  if (colon == std::string::npos) return InvalidArgument("an S3 endpoint needs a scheme");
  config.scheme = target.endpoint.substr(0, colon);
  config.host = target.endpoint.substr(colon + 3);
  config.bucket = target.bucket;
  config.virtual_hosted = false;
  config.region = target.region;
  config.credentials = {target.access_key, target.secret_key, ""};
  config.request_timeout = std::chrono::seconds(60);
  LMC_ASSIGN_OR_RETURN(auto client, tier::S3Client::Create(config));
  return std::unique_ptr<L2Reference>(std::make_unique<RawS3Reference>(std::move(client)));
#else
  (void)target;
  return Status(ErrorCode::kNotSupported, "this build has no s3 adapter (LMC_L2_S3)");
#endif
}

Result<L2Figures> MeasureL2Phase(const BenchOptions& o, const std::string& binary,
                                 const std::vector<std::string>& server_args,
                                 L2Reference& reference) {
  const std::uint64_t prompts = static_cast<std::uint64_t>(o.workers * o.prompts_per_worker);
  const std::uint64_t chunks = o.chunks_per_prompt();
  const std::uint64_t round_bytes = prompts * chunks * o.object_bytes();
  const std::vector<std::string> args = PhaseServerArgs(o, prompts * chunks, server_args);
  LMC_ASSIGN_OR_RETURN(auto server, tools::LocalServer::Start(binary, "lmcache_bench_l2", args));
  LMC_ASSIGN_OR_RETURN(
      auto c, ConnectRegistered(server->url(), 9'000'000, static_cast<std::int64_t>(o.bytes_per_token / 4)));
  if (c->ObjectBytes() != o.object_bytes()) return Internal("unexpected object size");

  RoundMemory memory(prompts * chunks, o.object_bytes());
  L2Figures figures;
  for (int round = -1; round < o.rounds; ++round) {  // round -1 warms up, untimed
    const std::uint64_t first = static_cast<std::uint64_t>(round + 2) * 1000;
    memory.Fill(first, chunks);
    LMC_ASSIGN_OR_RETURN(const double written, reference.Write(memory.Inputs()));
    LMC_ASSIGN_OR_RETURN(const double read, reference.Read(memory.Outputs()));

    // Store until every object is written behind to the tier.
    LMC_ASSIGN_OR_RETURN(tools::ServerStats before, tools::ServerStats::Fetch(*c));
    const double stored_before = before.Number("l2.store.stored").value_or(0);
    auto start = SteadyTime::now();
    const auto inputs = memory.Inputs();
    for (std::uint64_t p = 0; p < prompts; ++p) {
      std::span chunk_spans(inputs.data() + p * chunks, chunks);
      LMC_ASSIGN_OR_RETURN(const client::StoreResult stored,
                           c->Store(PromptKey(o, first + p, chunks), chunk_spans));
      if (stored.stored != chunks) return Internal("L1 did not take the round (pool too small?)");
    }
    LMC_RETURN_IF_ERROR(
        WaitWrittenBehind(*c, stored_before + static_cast<double>(prompts * chunks)));
    const double store_s = Seconds(start);
    LMC_RETURN_IF_ERROR(c->Call("clear", {}).status());

    // Lookups load it back into L1 (each waits for its prefetch).
    start = SteadyTime::now();
    for (std::uint64_t p = 0; p < prompts; ++p) {
      LMC_ASSIGN_OR_RETURN(const std::size_t hits, c->Lookup(PromptKey(o, first + p, chunks)));
      if (hits != chunks) return Internal("L2 returned " + std::to_string(hits) + " chunks");
    }
    const double load_s = Seconds(start);
    const auto outputs = memory.Outputs();
    for (std::uint64_t p = 0; p < prompts; ++p) {  // verify, untimed
      client::KeySpec key = PromptKey(o, first + p, chunks);
      LMC_RETURN_IF_ERROR(c->Retrieve(key, std::span(outputs.data() + p * chunks, chunks)));
      (void)c->EndSession(key.request_id);
    }
    if (std::memcmp(memory.in, memory.out, round_bytes) != 0) {
      return Internal("bytes loaded from L2 differ from the stored ones");
    }
    LMC_RETURN_IF_ERROR(c->Call("clear", {}).status());
    if (round < 0) continue;
    figures.store_gbps.push_back(static_cast<double>(round_bytes) / store_s / 1e9);
    figures.load_gbps.push_back(static_cast<double>(round_bytes) / load_s / 1e9);
    figures.reference_write_gbps.push_back(written);
    figures.reference_read_gbps.push_back(read);
  }
  (void)c->Unregister();
  return figures;
}

Status MeasureCrossNode(const BenchOptions& o, const std::string& binary,
                        const std::vector<std::string>& server_args, std::vector<double>* out) {
  const std::uint64_t prompts = static_cast<std::uint64_t>(o.workers * o.prompts_per_worker);
  const std::uint64_t chunks = o.chunks_per_prompt();
  const std::uint64_t round_bytes = prompts * chunks * o.object_bytes();
  const std::vector<std::string> args = PhaseServerArgs(o, prompts * chunks, server_args);
  LMC_ASSIGN_OR_RETURN(auto node_a,
                       tools::LocalServer::Start(binary, "lmcache_bench_node_a", args));
  LMC_ASSIGN_OR_RETURN(auto node_b,
                       tools::LocalServer::Start(binary, "lmcache_bench_node_b", args));
  const auto hidden = static_cast<std::int64_t>(o.bytes_per_token / 4);
  LMC_ASSIGN_OR_RETURN(auto a, ConnectRegistered(node_a->url(), 9'100'000, hidden));
  LMC_ASSIGN_OR_RETURN(auto b, ConnectRegistered(node_b->url(), 9'100'001, hidden));
  RoundMemory memory(prompts * chunks, o.object_bytes());
  const auto inputs = memory.Inputs();
  const auto outputs = memory.Outputs();
  for (int round = -1; round < o.rounds; ++round) {  // round -1 warms up, untimed
    // Prompts no other phase stored in the same Redis.
    const std::uint64_t first = 900'000 + static_cast<std::uint64_t>(round + 2) * 1000;
    memory.Fill(first, chunks);
    LMC_ASSIGN_OR_RETURN(tools::ServerStats before, tools::ServerStats::Fetch(*a));
    const double stored_before = before.Number("l2.store.stored").value_or(0);
    for (std::uint64_t p = 0; p < prompts; ++p) {
      LMC_RETURN_IF_ERROR(
          a->Store(PromptKey(o, first + p, chunks), std::span(inputs.data() + p * chunks, chunks))
              .status());
    }
    LMC_RETURN_IF_ERROR(
        WaitWrittenBehind(*a, stored_before + static_cast<double>(prompts * chunks)));
    const auto start = SteadyTime::now();
    for (std::uint64_t p = 0; p < prompts; ++p) {
      client::KeySpec key = PromptKey(o, first + p, chunks);
      LMC_ASSIGN_OR_RETURN(const std::size_t hits, b->Lookup(key));
      if (hits != chunks) {
        return Internal("node B found " + std::to_string(hits) + " of " + std::to_string(chunks) +
                        " chunks stored through node A");
      }
      LMC_RETURN_IF_ERROR(b->Retrieve(key, std::span(outputs.data() + p * chunks, chunks)));
      (void)b->EndSession(key.request_id);
    }
    const double seconds = Seconds(start);
    if (std::memcmp(memory.in, memory.out, round_bytes) != 0) {
      return Internal("bytes retrieved on node B differ from those stored on node A");
    }
    LMC_RETURN_IF_ERROR(a->Call("clear", {}).status());
    LMC_RETURN_IF_ERROR(b->Call("clear", {}).status());
    if (round >= 0) out->push_back(static_cast<double>(round_bytes) / seconds / 1e9);
  }
  (void)a->Unregister();
  (void)b->Unregister();
  return Status::Ok();
}

Status MeasureFsRebuild(const BenchOptions& o, const std::string& binary, const std::string& dir,
                        std::uint64_t objects, L2Figures* out) {
  const std::vector<std::string> args = {
      "--l1-size-gb", "1",
      "--log-level",  "warn",
      "--chunk-size", std::to_string(o.chunk_size),
      "--l2-adapter", R"({"type":"fs","base_path":")" + dir + R"(","fsync":false})"};
  constexpr std::uint64_t kChunksPerPrompt = 250;
  {
    LMC_ASSIGN_OR_RETURN(auto server, tools::LocalServer::Start(binary, "lmcache_bench_rb", args));
    LMC_ASSIGN_OR_RETURN(auto c, ConnectRegistered(server->url(), 9'000'001, 8));  // 8 KiB objects
    std::vector<std::byte> zeros(c->ObjectBytes());
    for (std::uint64_t p = 0; p * kChunksPerPrompt < objects; ++p) {
      const std::uint64_t n = std::min(kChunksPerPrompt, objects - p * kChunksPerPrompt);
      std::vector<std::span<const std::byte>> spans(n, zeros);
      LMC_RETURN_IF_ERROR(c->Store(PromptKey(o, 500'000 + p, n), spans).status());
    }
    LMC_RETURN_IF_ERROR(WaitWrittenBehind(*c, static_cast<double>(objects)));
  }  // stopped: SIGTERM
  LMC_ASSIGN_OR_RETURN(auto server, tools::LocalServer::Start(binary, "lmcache_bench_rb", args));
  client::ClientOptions options;
  options.url = server->url();
  LMC_ASSIGN_OR_RETURN(auto c, client::Client::Connect(options));
  LMC_ASSIGN_OR_RETURN(const tools::ServerStats stats, tools::ServerStats::Fetch(*c));
  out->rebuild_seconds = stats.Number("l2.adapters.0.rebuild_seconds").value_or(0);
  out->rebuild_objects =
      static_cast<std::uint64_t>(stats.Number("l2.adapters.0.rebuilt_objects").value_or(0));
  if (out->rebuild_objects != objects) {
    return Internal("the restarted server found " + std::to_string(out->rebuild_objects) +
                    " objects, expected " + std::to_string(objects));
  }
  return Status::Ok();
}

}  // namespace lmcache::bench
