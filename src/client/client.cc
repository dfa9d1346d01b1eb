#include "lmcache/client.h"

#include <algorithm>
#include <cstring>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/msgpack_codec.h"
#include "common/parallel.h"
#include "lmcache/protocol.h"
#include "shm/shm_segment.h"

namespace lmcache::client {
namespace {

using mp::AsBool;
using mp::AsInt;
using mp::AsString;
using mp::AsUint;
using mp::Encoder;
using mp::MapReader;

constexpr std::size_t kParallelCopyBytes = 8u << 20;

std::string EncodeKey(const KeySpec& key) {
  Encoder e;
  e.Map(9);
  e.Str("model_name").Str(key.model_name);
  e.Str("world_size").Int(key.world_size);
  e.Str("worker_id");
  if (key.worker_id) {
    e.Int(*key.worker_id);
  } else {
    e.Nil();
  }
  e.Str("token_ids").Array(static_cast<std::uint32_t>(key.token_ids.size()));
  for (const std::uint32_t token : key.token_ids) e.Uint(token);
  e.Str("start").Int(key.start);
  e.Str("end").Int(key.end);
  e.Str("request_id").Str(key.request_id);
  e.Str("cache_salt").Str(key.cache_salt);
  e.Str("num_kv_readers").Int(key.num_kv_readers);
  return e.Take();
}

struct Slot {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

Result<std::vector<Slot>> DecodeSlots(const msgpack::object& slots) {
  if (slots.type != msgpack::type::ARRAY) return mp::WrongType("slots", "array", slots);
  std::vector<Slot> out;
  for (std::uint32_t i = 0; i < slots.via.array.size; ++i) {
    LMC_ASSIGN_OR_RETURN(const MapReader slot, MapReader::Make(slots.via.array.ptr[i], "slot"));
    Slot s;
    LMC_RETURN_IF_ERROR(slot.Required("offset", &s.offset, AsUint));
    LMC_RETURN_IF_ERROR(slot.Required("length", &s.length, AsUint));
    out.push_back(s);
  }
  return out;
}

// The "context" map of a prepare_store / prepare_retrieve reply and its slots.
struct ReplyContext {
  std::vector<Slot> slots;
  const msgpack::object* chunk_indices = nullptr;  // prepare_store only
};

Result<ReplyContext> ReadContext(const MapReader& reply, std::string_view what) {
  const msgpack::object* context = reply.Field("context");
  if (context == nullptr) return mp::Malformed(what, "no context");
  LMC_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(*context, "context"));
  const msgpack::object* slots = map.Field("slots");
  if (slots == nullptr) return mp::Malformed(what, "no slots");
  ReplyContext out;
  LMC_ASSIGN_OR_RETURN(out.slots, DecodeSlots(*slots));
  out.chunk_indices = map.Field("chunk_indices");
  return out;
}

struct CopyPiece {
  std::byte* dst;
  const std::byte* src;
  std::size_t size;
};

// Copies every piece; above kParallelCopyBytes the bytes are split evenly over threads.
void ParallelCopy(const std::vector<CopyPiece>& pieces, unsigned threads) {
  std::size_t total = 0;
  for (const CopyPiece& p : pieces) total += p.size;
  if (total < kParallelCopyBytes || threads == 1) {
    for (const CopyPiece& p : pieces) std::memcpy(p.dst, p.src, p.size);
    return;
  }
  // Treat the pieces as one byte range [0, total) and give each thread a slice.
  ParallelFor(total, 1u << 20, threads, [&pieces](std::size_t begin, std::size_t end) {
    std::size_t base = 0;
    for (const CopyPiece& p : pieces) {
      const std::size_t lo = std::max(begin, base);
      const std::size_t hi = std::min(end, base + p.size);
      if (lo < hi) std::memcpy(p.dst + (lo - base), p.src + (lo - base), hi - lo);
      base += p.size;
      if (base >= end) break;
    }
  });
}

}  // namespace

struct Client::Impl {
  ClientOptions options;
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  std::uint64_t next_uid = 0;
  std::optional<EngineContext> engine;
  Registration registration;
  std::uint64_t object_bytes = 0;
  std::int64_t chunk_size = 0;
  std::unique_ptr<shm::ShmSegment> pool;

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
        socket.send(zmq::buffer(payloads[i]),
                    i + 1 == payloads.size() ? zmq::send_flags::none : zmq::send_flags::sndmore);
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
        if (frames.size() >= 4) return DecodeError(frames[3].to_string_view());
        return std::string(frames[2].to_string_view());
      }
    } catch (const zmq::error_t& e) {
      return Status(ErrorCode::kUnavailable, std::string("zmq: ") + e.what());
    }
  }

  static Status DecodeError(std::string_view frame) {
    auto handle = mp::Parse(frame, "error");
    if (!handle.ok()) return handle.status();
    auto map = MapReader::Make(handle->get(), "error");
    if (!map.ok()) return map.status();
    std::int64_t code = static_cast<std::int64_t>(ErrorCode::kInternal);
    std::string message = "server error without a message";
    (void)map->Optional("code", &code, AsInt);
    (void)map->Optional("message", &message, AsString);
    return Status(static_cast<ErrorCode>(code), message);
  }

  // By frozen integer id, as reference clients send it.
  Result<std::string> CallOp(Op op, std::vector<std::string> payloads) {
    return Call(Encoder().Int(static_cast<std::int64_t>(op)).Take(), std::move(payloads));
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

  Result<std::byte*> PoolBytes(const Slot& slot) const {
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
  LMC_ASSIGN_OR_RETURN(const std::string value, impl_->CallOp(Op::kPing, {Encoder().Nil().Take()}));
  LMC_ASSIGN_OR_RETURN(auto handle, mp::Parse(value, "ping reply"));
  LMC_ASSIGN_OR_RETURN(const bool ok, AsBool(handle.get(), "ping reply"));
  return ok ? Status::Ok() : Status(ErrorCode::kUnavailable, "ping answered false");
}

Result<ServerInfo> Client::GetServerInfo() {
  LMC_ASSIGN_OR_RETURN(const std::string value, Call("server_info", {}));
  LMC_ASSIGN_OR_RETURN(auto handle, mp::Parse(value, "server_info"));
  LMC_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(handle.get(), "server_info"));
  ServerInfo info;
  LMC_RETURN_IF_ERROR(map.Required("version", &info.version, AsString));
  LMC_RETURN_IF_ERROR(map.Required("boot_id", &info.boot_id, AsString));
  LMC_RETURN_IF_ERROR(map.Required("shm_name", &info.shm_name, AsString));
  LMC_RETURN_IF_ERROR(map.Required("pool_size", &info.pool_size, AsUint));
  LMC_RETURN_IF_ERROR(map.Required("chunk_size", &info.chunk_size, AsInt));
  return info;
}

Result<std::int64_t> Client::GetChunkSize() {
  LMC_ASSIGN_OR_RETURN(const std::string value, impl_->CallOp(Op::kGetChunkSize, {}));
  LMC_ASSIGN_OR_RETURN(auto handle, mp::Parse(value, "chunk size"));
  return AsInt(handle.get(), "chunk size");
}

Result<Registration> Client::Register(const EngineContext& c) {
  Encoder e;
  e.Map(8);
  e.Str("instance_id").Int(c.instance_id);
  e.Str("model_name").Str(c.model_name);
  e.Str("world_size").Int(c.world_size);
  e.Str("block_size").Int(c.block_size);
  e.Str("num_layers").Int(c.num_layers);
  e.Str("hidden_dim_size").Int(c.hidden_dim_size);
  e.Str("dtype_str").Str(c.dtype);
  e.Str("use_mla").Bool(c.use_mla);
  LMC_ASSIGN_OR_RETURN(const std::string value,
                       impl_->CallOp(Op::kRegisterEngineContext, {e.Take()}));
  LMC_ASSIGN_OR_RETURN(auto handle, mp::Parse(value, "registration"));
  LMC_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(handle.get(), "registration"));
  Registration r;
  LMC_RETURN_IF_ERROR(map.Required("shm_name", &r.shm_name, AsString));
  LMC_RETURN_IF_ERROR(map.Required("pool_size", &r.pool_size, AsUint));
  LMC_RETURN_IF_ERROR(map.Optional("boot_id", &r.boot_id, AsString));
  if (r.shm_name.empty()) {
    return Status(ErrorCode::kNotSupported, "the server offers no shared-memory pool");
  }
  LMC_ASSIGN_OR_RETURN(impl_->pool, shm::ShmSegment::Attach(r.shm_name, r.pool_size));
  if (impl_->options.prefault_pool) (void)impl_->pool->Prefault(impl_->options.copy_threads);
  LMC_RETURN_IF_ERROR(map.Required("object_bytes", &impl_->object_bytes, AsUint));
  LMC_ASSIGN_OR_RETURN(impl_->chunk_size, GetChunkSize());
  impl_->engine = c;
  impl_->registration = r;
  return r;
}

Status Client::Unregister() {
  if (!impl_->engine) return Status::Ok();
  LMC_RETURN_IF_ERROR(
      impl_->CallOp(Op::kUnregisterEngineContext, {impl_->InstanceFrame()}).status());
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
  const std::string key_frame = EncodeKey(key);
  LMC_ASSIGN_OR_RETURN(const std::string value,
                       impl_->CallOp(Op::kPrepareStore, {key_frame, impl_->InstanceFrame()}));
  LMC_ASSIGN_OR_RETURN(auto handle, mp::Parse(value, "prepare_store reply"));
  LMC_ASSIGN_OR_RETURN(const MapReader reply, MapReader::Make(handle.get(), "prepare_store"));
  LMC_ASSIGN_OR_RETURN(const ReplyContext context, ReadContext(reply, "prepare_store reply"));
  const msgpack::object* indices_field = context.chunk_indices;
  if (indices_field == nullptr || indices_field->type != msgpack::type::ARRAY) {
    return mp::Malformed("prepare_store reply", "no chunk_indices");
  }
  const std::vector<Slot>& slots = context.slots;
  StoreResult result;
  LMC_RETURN_IF_ERROR(reply.Optional("oom_chunks", &result.out_of_memory, AsUint));
  if (slots.empty()) {
    result.already_cached = chunks.size() - result.out_of_memory;
    return result;
  }
  if (indices_field->via.array.size != slots.size()) {
    return mp::Malformed("prepare_store reply", "slots and chunk_indices differ in length");
  }
  std::vector<CopyPiece> pieces;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    LMC_ASSIGN_OR_RETURN(const std::uint64_t index,
                         AsUint(indices_field->via.array.ptr[i], "chunk index"));
    if (index >= chunks.size())
      return mp::Malformed("prepare_store reply", "chunk index out of range");
    LMC_ASSIGN_OR_RETURN(std::byte * dst, impl_->PoolBytes(slots[i]));
    pieces.push_back({dst, chunks[index].data(), chunks[index].size()});
  }
  ParallelCopy(pieces, impl_->options.copy_threads);
  LMC_ASSIGN_OR_RETURN(const std::string committed,
                       impl_->CallOp(Op::kCommitStore, {key_frame, impl_->InstanceFrame(),
                                                        Encoder().Bin("").Take()}));
  LMC_ASSIGN_OR_RETURN(auto commit_handle, mp::Parse(committed, "commit_store reply"));
  LMC_ASSIGN_OR_RETURN(const bool ok, AsBool(commit_handle.get(), "commit_store reply"));
  if (!ok) return Status(ErrorCode::kInternal, "commit_store answered false");
  result.stored = slots.size();
  result.already_cached = chunks.size() - slots.size() - result.out_of_memory;
  return result;
}

Result<std::size_t> Client::Lookup(const KeySpec& key) {
  KeySpec lookup = key;
  lookup.worker_id.reset();
  LMC_RETURN_IF_ERROR(
      impl_->CallOp(Op::kLookup, {EncodeKey(lookup), Encoder().Int(lookup.world_size).Take()})
          .status());
  LMC_ASSIGN_OR_RETURN(const std::string value,
                       impl_->CallOp(Op::kWaitPrefetchStatus, {Encoder().Str(key.request_id).Take(),
                                                               Encoder().Float(10.0).Take()}));
  LMC_ASSIGN_OR_RETURN(auto handle, mp::Parse(value, "prefetch status"));
  if (handle.get().type == msgpack::type::NIL) {
    return Status(ErrorCode::kTimeout, "the lookup did not finish");
  }
  LMC_ASSIGN_OR_RETURN(const std::uint64_t hits, AsUint(handle.get(), "prefetch status"));
  return static_cast<std::size_t>(hits);
}

Status Client::Retrieve(const KeySpec& key, std::span<const std::span<std::byte>> out) {
  LMC_RETURN_IF_ERROR(impl_->RequireRegistration());
  LMC_RETURN_IF_ERROR(impl_->CheckChunks(key, out.size()));
  const std::string key_frame = EncodeKey(key);
  LMC_ASSIGN_OR_RETURN(const std::string value,
                       impl_->CallOp(Op::kPrepareRetrieve, {key_frame, impl_->InstanceFrame()}));
  LMC_ASSIGN_OR_RETURN(auto handle, mp::Parse(value, "prepare_retrieve reply"));
  LMC_ASSIGN_OR_RETURN(const MapReader reply, MapReader::Make(handle.get(), "prepare_retrieve"));
  bool success = false;
  LMC_RETURN_IF_ERROR(reply.Required("success", &success, AsBool));
  if (!success) return Status(ErrorCode::kNotFound, "prepare_retrieve failed");
  LMC_ASSIGN_OR_RETURN(const ReplyContext context, ReadContext(reply, "prepare_retrieve reply"));
  const std::vector<Slot>& slots = context.slots;
  Status copy_status;
  if (slots.size() != out.size()) {
    copy_status = mp::Malformed("prepare_retrieve reply", "slot count differs from the range");
  } else {
    std::vector<CopyPiece> pieces;
    for (std::size_t i = 0; i < slots.size() && copy_status.ok(); ++i) {
      auto src = impl_->PoolBytes(slots[i]);
      if (!src.ok() || out[i].size() != slots[i].length) {
        copy_status =
            src.ok() ? InvalidArgument("an output buffer has the wrong size") : src.status();
        break;
      }
      pieces.push_back({out[i].data(), *src, out[i].size()});
    }
    if (copy_status.ok()) ParallelCopy(pieces, impl_->options.copy_threads);
  }
  // Release the locks whatever happened to the copy.
  Status commit = impl_->CallOp(Op::kCommitRetrieve, {key_frame, impl_->InstanceFrame()}).status();
  LMC_RETURN_IF_ERROR(copy_status);
  return commit;
}

Status Client::FreeLookupLocks(const KeySpec& key) {
  KeySpec lookup = key;
  lookup.worker_id.reset();
  return impl_
      ->CallOp(Op::kFreeLookupLocks, {EncodeKey(lookup), Encoder().Int(lookup.world_size).Take()})
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
