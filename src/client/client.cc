#include "lmcache/client.h"

#include <algorithm>
#include <cstring>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"
#include "common/mutex.h"
#include "common/parallel.h"
#include "common/stream_copy.h"
#include "lmcache/protocol.h"
#include "protocol/wire_codec.h"
#include "shm/page_warmer.h"
#include "shm/shm_segment.h"

namespace lmcache::client {
namespace {

using msgpk::Encoder;

constexpr std::size_t kParallelCopyBytes = 8u << 20;

struct CopyPiece {
  std::byte* dst;
  const std::byte* src;
  std::size_t size;
};

// Copies every piece with streaming stores (nobody here reads the destination
// next); above kParallelCopyBytes the bytes are split evenly over the
// client's copy threads (kept for its life: issue 18).
void ParallelCopy(const std::vector<CopyPiece>& pieces, ParallelRunner* copiers) {
  std::size_t total = 0;
  for (const CopyPiece& p : pieces) total += p.size;
  if (total < kParallelCopyBytes || copiers == nullptr) {
    for (const CopyPiece& p : pieces) StreamCopy(p.dst, p.src, p.size);
    return;
  }
  // Treat the pieces as one byte range [0, total) and give each thread a slice.
  copiers->Run(total, 1u << 20, [&pieces](std::size_t begin, std::size_t end) {
    std::size_t base = 0;
    for (const CopyPiece& p : pieces) {
      const std::size_t lo = std::max(begin, base);
      const std::size_t hi = std::min(end, base + p.size);
      if (lo < hi) StreamCopy(p.dst + (lo - base), p.src + (lo - base), hi - lo);
      base += p.size;
      if (base >= end) break;
    }
  });
}

// Large request frames (a long prompt's key) go to ZMQ without a copy, in
// buffers that come back here when ZMQ is done with them and are reused: a
// fresh allocation of a few hundred KiB is mmapped, and its page faults cost
// more than encoding the key. ZMQ frees a sent message on its I/O thread.
class FrameBuffers {
 public:
  // At or above this size a frame is sent zero-copy.
  static constexpr std::size_t kZeroCopyBytes = 32u << 10;

  // An empty buffer, with the capacity of an earlier frame when one is free.
  std::string Take() {
    MutexLock lock(&mu_);
    if (free_.empty()) return {};
    std::string buffer = std::move(free_.back());
    free_.pop_back();
    return buffer;
  }

  // A message that owns `frame` and hands it back to this pool when sent.
  zmq::message_t Wrap(std::string frame) {
    auto* owned = new Holder{this, std::move(frame)};
    return zmq::message_t(owned->bytes.data(), owned->bytes.size(), &Release, owned);
  }

 private:
  struct Holder {
    FrameBuffers* pool;
    std::string bytes;
  };
  static constexpr std::size_t kKeep = 4;
  static void Release(void* /*data*/, void* hint) {
    std::unique_ptr<Holder> holder(static_cast<Holder*>(hint));
    MutexLock lock(&holder->pool->mu_);
    if (holder->pool->free_.size() < kKeep) holder->pool->free_.push_back(std::move(holder->bytes));
  }

  Mutex mu_;
  std::vector<std::string> free_ LMC_GUARDED_BY(mu_);
};

}  // namespace

struct Client::Impl {
  ClientOptions options;
  FrameBuffers frame_buffers;  // outlives the context, which frees messages still queued
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  std::uint64_t next_uid = 0;
  std::optional<EngineContext> engine;
  Registration registration;
  std::uint64_t object_bytes = 0;
  std::int64_t chunk_size = 0;
  std::unique_ptr<shm::ShmSegment> pool;
  std::unique_ptr<shm::PageWarmer> warmer;  // declared after the pool: goes first
  std::unique_ptr<ParallelRunner> copiers;  // null with one copy thread

  // Sends one request and waits for its reply; returns the value frame or the
  // server's error. Replies to earlier, timed-out requests are skipped.
  Result<std::string> Call(const std::string& op_frame, std::vector<std::string> payloads) {
    const std::uint64_t uid = next_uid++;
    const std::string uid_frame = Encoder().Uint(uid).Take();
    try {
      socket.send(zmq::buffer(uid_frame), zmq::send_flags::sndmore);
      socket.send(zmq::buffer(op_frame),
                  payloads.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        const auto flags =
            i + 1 == payloads.size() ? zmq::send_flags::none : zmq::send_flags::sndmore;
        if (payloads[i].size() >= FrameBuffers::kZeroCopyBytes) {
          socket.send(frame_buffers.Wrap(std::move(payloads[i])), flags);
        } else {
          socket.send(zmq::buffer(payloads[i]), flags);
        }
      }
      const auto deadline = std::chrono::steady_clock::now() + options.request_timeout;
      while (true) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
        if (left.count() <= 0 || zmq::poll(&item, 1, left) == 0) {
          return Status(ErrorCode::kTimeout, "no reply from " + options.url + " within " +
                                                 std::to_string(options.request_timeout.count()) +
                                                 " ms");
        }
        std::vector<zmq::message_t> frames;
        (void)zmq::recv_multipart(socket, std::back_inserter(frames));
        if (frames.size() < 3 || frames[0].to_string_view() != uid_frame) continue;  // stale
        if (frames.size() >= 4) return protocol::DecodeErrorMap(frames[3].to_string_view());
        return std::string(frames[2].to_string_view());
      }
    } catch (const zmq::error_t& e) {
      return Status(ErrorCode::kUnavailable, std::string("zmq: ") + e.what());
    }
  }

  // By frozen integer id, as reference clients send it.
  Result<std::string> CallOp(Op op, std::vector<std::string> payloads) {
    return Call(Encoder().Int(static_cast<std::int64_t>(op)).Take(), std::move(payloads));
  }

  // `frame` again, in a reused buffer (the request consumes its frames).
  std::string CopyFrame(const std::string& frame) {
    std::string copy = frame_buffers.Take();
    copy.assign(frame);
    return copy;
  }

  std::string InstanceFrame() const { return Encoder().Int(engine->instance_id).Take(); }

  Status RequireRegistration() const {
    if (!engine || !pool) {
      return Status(ErrorCode::kNotRegistered, "call Register() before storing or retrieving");
    }
    return Status::Ok();
  }

  Status CheckChunks(const KeySpec& key, std::size_t given) const {
    const std::int64_t chunks = chunk_size > 0 ? (key.end - key.start) / chunk_size : -1;
    if (static_cast<std::int64_t>(given) != chunks) {
      return InvalidArgument("the key range holds " + std::to_string(chunks) + " chunks, " +
                             std::to_string(given) + " buffers were given");
    }
    return Status::Ok();
  }

  Result<std::byte*> PoolBytes(const SlotDescriptor& slot) const {
    if (slot.length != object_bytes || slot.offset > pool->size() ||
        slot.length > pool->size() - slot.offset) {
      return Status(ErrorCode::kInternal, "the server returned a slot outside the pool");
    }
    return pool->base() + slot.offset;
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.copy_threads == 0) impl->options.copy_threads = HardwareThreads();
  if (impl->options.copy_threads > 1) {
    impl->copiers = std::make_unique<ParallelRunner>(impl->options.copy_threads);
  }
  try {
    impl->socket.set(zmq::sockopt::linger, 0);
    impl->socket.set(zmq::sockopt::connect_timeout,
                     static_cast<int>(options.connect_timeout.count()));
    impl->socket.set(zmq::sockopt::reconnect_ivl_max, 1000);
    impl->socket.connect(options.url);
  } catch (const zmq::error_t& e) {
    return Status(ErrorCode::kInvalidArgument,
                  "cannot connect to " + options.url + ": " + e.what());
  }
  std::unique_ptr<Client> client(new Client(std::move(impl)));
  return client;
}

Status Client::Ping() {
  const std::string instance =
      impl_->engine ? impl_->InstanceFrame() : Encoder().Nil().Take();
  LMC_ASSIGN_OR_RETURN(const std::string value, impl_->CallOp(Op::kPing, {instance}));
  LMC_ASSIGN_OR_RETURN(const bool ok, protocol::DecodeBool(value, "ping reply"));
  if (ok) return Status::Ok();
  return Status(ErrorCode::kNotRegistered,
                "the server does not hold this client's registration (restarted, reaped, or "
                "the connection changed): register again");
}

Result<ServerInfo> Client::GetServerInfo() {
  LMC_ASSIGN_OR_RETURN(const std::string value, Call("server_info", {}));
  ServerInfo info;
  unsigned seen = 0;
  msgpk::MsgpackCursor in(value);
  LMC_RETURN_IF_ERROR(in.ReadFields("server_info", [&](std::string_view name) -> Result<bool> {
    auto text = [&](std::string* out) -> Result<bool> {
      LMC_ASSIGN_OR_RETURN(const std::string_view v, in.ReadStr(name));
      *out = std::string(v);
      seen += 1;
      return true;
    };
    if (name == "version") return text(&info.version);
    if (name == "boot_id") return text(&info.boot_id);
    if (name == "shm_name") return text(&info.shm_name);
    if (name == "pool_size") {
      LMC_ASSIGN_OR_RETURN(info.pool_size, in.ReadUint(name));
    } else if (name == "chunk_size") {
      LMC_ASSIGN_OR_RETURN(info.chunk_size, in.ReadInt(name));
    } else {
      return false;
    }
    seen += 1;
    return true;
  }));
  if (seen < 5) return msgpk::Malformed("server_info", "missing fields");
  return info;
}

Result<std::int64_t> Client::GetChunkSize() {
  LMC_ASSIGN_OR_RETURN(const std::string value, impl_->CallOp(Op::kGetChunkSize, {}));
  return protocol::DecodeInt(value, "chunk size");
}

Result<Registration> Client::Register(const EngineContext& c) {
  LMC_ASSIGN_OR_RETURN(const std::string value,
                       impl_->CallOp(Op::kRegisterEngineContext, {protocol::EncodeEngineContext(c)}));
  LMC_ASSIGN_OR_RETURN(const Registration r, protocol::DecodeRegistration(value));
  if (r.shm_name.empty()) {
    return Status(ErrorCode::kNotSupported, "the server offers no shared-memory pool");
  }
  if (r.object_bytes == 0) return msgpk::Malformed("registration", "no object_bytes");
  LMC_ASSIGN_OR_RETURN(auto pool, shm::ShmSegment::Attach(r.shm_name, r.pool_size));
  impl_->warmer.reset();  // it reads the old mapping: stopped before that goes
  impl_->pool = std::move(pool);
  if (impl_->options.prefault_pool) {
    impl_->warmer = std::make_unique<shm::PageWarmer>(impl_->pool.get());
  }
  impl_->object_bytes = r.object_bytes;
  LMC_ASSIGN_OR_RETURN(impl_->chunk_size, GetChunkSize());
  impl_->engine = c;
  impl_->registration = r;
  return r;
}

bool Client::WaitPoolWarm(std::chrono::milliseconds timeout) {
  return impl_->warmer && impl_->warmer->WaitDone(timeout);
}

Status Client::Unregister() {
  if (!impl_->engine) return Status::Ok();
  LMC_RETURN_IF_ERROR(
      impl_->CallOp(Op::kUnregisterEngineContext, {impl_->InstanceFrame()}).status());
  impl_->warmer.reset();
  impl_->pool.reset();
  impl_->engine.reset();
  return Status::Ok();
}

Result<StoreResult> Client::Store(const KeySpec& key,
                                  std::span<const std::span<const std::byte>> chunks) {
  LMC_RETURN_IF_ERROR(impl_->RequireRegistration());
  LMC_RETURN_IF_ERROR(impl_->CheckChunks(key, chunks.size()));
  for (const auto& chunk : chunks) {
    if (chunk.size() != impl_->object_bytes) {
      return InvalidArgument("every chunk must hold " + std::to_string(impl_->object_bytes) +
                             " bytes, one holds " + std::to_string(chunk.size()));
    }
  }
  std::string key_frame = protocol::EncodeIpcKey(key, impl_->frame_buffers.Take());
  LMC_ASSIGN_OR_RETURN(const std::string value,
                       impl_->CallOp(Op::kPrepareStore, {impl_->CopyFrame(key_frame), impl_->InstanceFrame()}));
  LMC_ASSIGN_OR_RETURN(const PrepareStoreReply reply, protocol::DecodePrepareStoreReply(value));
  StoreResult result;
  result.out_of_memory = reply.oom_chunks;
  if (reply.slots.empty()) {
    result.already_cached = chunks.size() - std::min<std::size_t>(result.out_of_memory, chunks.size());
    return result;
  }
  std::vector<CopyPiece> pieces;
  for (std::size_t i = 0; i < reply.slots.size(); ++i) {
    const std::uint64_t index = reply.chunk_indices[i];
    if (index >= chunks.size()) {
      return msgpk::Malformed("prepare_store reply", "chunk index out of range");
    }
    LMC_ASSIGN_OR_RETURN(std::byte * dst, impl_->PoolBytes(reply.slots[i]));
    pieces.push_back({dst, chunks[index].data(), chunks[index].size()});
  }
  ParallelCopy(pieces, impl_->copiers.get());
  LMC_ASSIGN_OR_RETURN(const std::string committed,
                       impl_->CallOp(Op::kCommitStore, {std::move(key_frame), impl_->InstanceFrame(),
                                                        Encoder().Bin("").Take()}));
  LMC_ASSIGN_OR_RETURN(const bool ok, protocol::DecodeBool(committed, "commit_store reply"));
  if (!ok) return Status(ErrorCode::kInternal, "commit_store answered false");
  result.stored = reply.slots.size();
  result.already_cached = chunks.size() - reply.slots.size() - result.out_of_memory;
  return result;
}

Result<std::size_t> Client::Lookup(const KeySpec& key) {
  LMC_RETURN_IF_ERROR(
      impl_
          ->CallOp(Op::kLookup, {protocol::EncodeLookupKey(key, impl_->frame_buffers.Take()),
                                 Encoder().Int(key.world_size).Take()})
          .status());
  LMC_ASSIGN_OR_RETURN(const std::string value,
                       impl_->CallOp(Op::kWaitPrefetchStatus, {Encoder().Str(key.request_id).Take(),
                                                               Encoder().Float(10.0).Take()}));
  LMC_ASSIGN_OR_RETURN(const std::optional<std::int64_t> hits,
                       protocol::DecodeOptionalInt(value, "prefetch status"));
  if (!hits) return Status(ErrorCode::kTimeout, "the lookup did not finish");
  if (*hits < 0) return msgpk::Malformed("prefetch status", "negative chunk count");
  return static_cast<std::size_t>(*hits);
}

Status Client::Retrieve(const KeySpec& key, std::span<const std::span<std::byte>> out) {
  LMC_RETURN_IF_ERROR(impl_->RequireRegistration());
  LMC_RETURN_IF_ERROR(impl_->CheckChunks(key, out.size()));
  std::string key_frame = protocol::EncodeIpcKey(key, impl_->frame_buffers.Take());
  LMC_ASSIGN_OR_RETURN(const std::string value,
                       impl_->CallOp(Op::kPrepareRetrieve, {impl_->CopyFrame(key_frame), impl_->InstanceFrame()}));
  LMC_ASSIGN_OR_RETURN(const PrepareRetrieveReply reply,
                       protocol::DecodePrepareRetrieveReply(value));
  if (!reply.success) return Status(ErrorCode::kNotFound, "prepare_retrieve failed");
  Status copy_status;
  if (reply.slots.size() != out.size()) {
    copy_status = msgpk::Malformed("prepare_retrieve reply", "slot count differs from the range");
  } else {
    std::vector<CopyPiece> pieces;
    for (std::size_t i = 0; i < reply.slots.size(); ++i) {
      auto src = impl_->PoolBytes(reply.slots[i]);
      if (!src.ok() || out[i].size() != reply.slots[i].length) {
        copy_status =
            src.ok() ? InvalidArgument("an output buffer has the wrong size") : src.status();
        break;
      }
      pieces.push_back({out[i].data(), *src, out[i].size()});
    }
    if (copy_status.ok()) ParallelCopy(pieces, impl_->copiers.get());
  }
  // Release the locks whatever happened to the copy.
  Status commit = impl_->CallOp(Op::kCommitRetrieve, {std::move(key_frame), impl_->InstanceFrame()}).status();
  LMC_RETURN_IF_ERROR(copy_status);
  return commit;
}

Status Client::FreeLookupLocks(const KeySpec& key) {
  return impl_
      ->CallOp(Op::kFreeLookupLocks,
               {protocol::EncodeLookupKey(key, impl_->frame_buffers.Take()),
                Encoder().Int(key.world_size).Take()})
      .status();
}

Status Client::EndSession(const std::string& request_id) {
  return impl_->CallOp(Op::kEndSession, {Encoder().Str(request_id).Take()}).status();
}

std::uint64_t Client::ObjectBytes() const { return impl_->object_bytes; }
const Registration& Client::registration() const { return impl_->registration; }

Result<std::string> Client::Call(std::string_view operation, std::vector<std::string> payloads) {
  return impl_->Call(Encoder().Str(operation).Take(), std::move(payloads));
}

}  // namespace lmcache::client
