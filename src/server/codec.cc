#include "server/codec.h"

#include "common/msgpack_cursor.h"

#include <limits>

namespace lmcache::server {
namespace {

using mp::AsBool;
using mp::AsBytes;
using mp::AsFloat;
using mp::AsInt;
using mp::AsString;
using mp::Malformed;
using mp::MapReader;
using mp::Parse;
using mp::WrongType;
using msgpack::type::object_type;

}  // namespace

Result<OpSpec> DecodeOperation(std::string_view frame) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(frame, "operation"));
  const msgpack::object& o = handle.get();
  if (o.type == object_type::STR) {
    const std::string_view name(o.via.str.ptr, o.via.str.size);
    if (auto spec = FindOpByName(name)) return *spec;
    return Status(ErrorCode::kUnknownOperation, "unknown operation '" + std::string(name) + "'");
  }
  if (o.type == object_type::POSITIVE_INTEGER || o.type == object_type::NEGATIVE_INTEGER) {
    if (o.type == object_type::POSITIVE_INTEGER &&
        o.via.u64 > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return Status(ErrorCode::kUnknownOperation,
                    "unknown operation id " + std::to_string(o.via.u64));
    }
    const std::int64_t id =
        o.type == object_type::POSITIVE_INTEGER ? static_cast<std::int64_t>(o.via.u64) : o.via.i64;
    if (auto spec = FindOpById(id)) return *spec;
    return Status(ErrorCode::kUnknownOperation, "unknown operation id " + std::to_string(id));
  }
  return WrongType("operation", "int id or str name", o);
}

Result<std::int64_t> DecodeInt(std::string_view frame, std::string_view what) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(frame, what));
  return AsInt(handle.get(), what);
}

Result<std::optional<std::int64_t>> DecodeOptionalInt(std::string_view frame,
                                                      std::string_view what) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(frame, what));
  if (handle.get().type == object_type::NIL) return std::optional<std::int64_t>();
  LMC_ASSIGN_OR_RETURN(const std::int64_t value, AsInt(handle.get(), what));
  return std::optional<std::int64_t>(value);
}

Result<bool> DecodeBool(std::string_view frame, std::string_view what) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(frame, what));
  return AsBool(handle.get(), what);
}

Result<double> DecodeFloat(std::string_view frame, std::string_view what) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(frame, what));
  return AsFloat(handle.get(), what);
}

Result<std::string> DecodeString(std::string_view frame, std::string_view what) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(frame, what));
  return AsString(handle.get(), what);
}

Result<std::string> DecodeBytes(std::string_view frame, std::string_view what) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(frame, what));
  return AsBytes(handle.get(), what);
}

// The hot path of every request: read in place with MsgpackCursor (msgpack-c
// would build one object per token, ~3 ms for a 131072-token prompt). Same
// rules as MapReader: unknown (or non-string) keys are skipped, missing
// optional fields and nil ones keep their defaults, missing required fields
// and wrong types are errors naming the field.
Result<IpcKey> DecodeIpcKey(std::string_view frame) {
  const DecodeLimits& limits = DefaultDecodeLimits();
  if (frame.size() > limits.max_frame_bytes) {
    return Status(ErrorCode::kTooLarge, "key: frame of " + std::to_string(frame.size()) +
                                            " bytes exceeds " +
                                            std::to_string(limits.max_frame_bytes));
  }
  if (frame.empty()) return Malformed("key", "empty frame");
  mp::MsgpackCursor in(frame, limits);
  LMC_ASSIGN_OR_RETURN(const std::uint32_t fields, in.ReadMapHeader("key"));
  IpcKey key;
  bool has_worker = false;
  std::uint32_t required = 0;  // bit per required field seen
  auto text = [&in](std::string_view what, std::string* out) -> Status {
    LMC_ASSIGN_OR_RETURN(const std::string_view value, in.ReadStr(what));
    out->assign(value);
    return Status::Ok();
  };
  auto integer = [&in](std::string_view what, std::int64_t* out) -> Status {
    LMC_ASSIGN_OR_RETURN(*out, in.ReadInt(what));
    return Status::Ok();
  };
  for (std::uint32_t i = 0; i < fields; ++i) {
    if (!in.NextIsStr()) {
      LMC_RETURN_IF_ERROR(in.Skip());  // key
      LMC_RETURN_IF_ERROR(in.Skip());  // value
      continue;
    }
    LMC_ASSIGN_OR_RETURN(const std::string_view name, in.ReadStr("key"));
    if (name == "model_name") {
      LMC_RETURN_IF_ERROR(text("key.model_name", &key.model_name));
      required |= 1;
    } else if (name == "world_size") {
      LMC_RETURN_IF_ERROR(integer("key.world_size", &key.world_size));
      required |= 2;
    } else if (name == "worker_id") {
      has_worker = true;
      if (in.NextIsNil()) {
        LMC_RETURN_IF_ERROR(in.ReadNil("key.worker_id"));
        key.worker_id.reset();
      } else {
        LMC_ASSIGN_OR_RETURN(key.worker_id, in.ReadInt("key.worker_id"));
      }
    } else if (name == "token_ids") {
      LMC_ASSIGN_OR_RETURN(key.token_ids, in.ReadUint32Array("key.token_ids"));
      required |= 4;
    } else if (name == "start") {
      LMC_RETURN_IF_ERROR(integer("key.start", &key.start));
      required |= 8;
    } else if (name == "end") {
      LMC_RETURN_IF_ERROR(integer("key.end", &key.end));
      required |= 16;
    } else if (name == "request_id") {
      LMC_RETURN_IF_ERROR(text("key.request_id", &key.request_id));
      required |= 32;
    } else if (name == "cache_salt" && !in.NextIsNil()) {
      LMC_RETURN_IF_ERROR(text("key.cache_salt", &key.cache_salt));
    } else if (name == "num_kv_readers" && !in.NextIsNil()) {
      LMC_RETURN_IF_ERROR(integer("key.num_kv_readers", &key.num_kv_readers));
    } else {
      LMC_RETURN_IF_ERROR(in.Skip());  // unknown field, or nil for an optional one
    }
  }
  if (!in.AtEnd()) return Malformed("key", "trailing bytes after the map");
  static constexpr std::pair<std::uint32_t, const char*> kRequired[] = {
      {1, "model_name"}, {2, "world_size"}, {4, "token_ids"},
      {8, "start"},      {16, "end"},       {32, "request_id"}};
  for (const auto& [bit, field] : kRequired) {
    if ((required & bit) == 0) {
      return Malformed("key", "missing required field '" + std::string(field) + "'");
    }
  }
  if (!has_worker)
    return Malformed("key", "missing required field 'worker_id' (nil for all ranks)");
  return key;
}

Result<RegisterContextPayload> DecodeRegisterContext(std::string_view frame) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(frame, "payload"));
  LMC_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(handle.get(), "payload"));
  RegisterContextPayload p;
  LMC_RETURN_IF_ERROR(map.Required("instance_id", &p.instance_id, AsInt));
  LMC_RETURN_IF_ERROR(map.Required("model_name", &p.model_name, AsString));
  LMC_RETURN_IF_ERROR(map.Required("world_size", &p.world_size, AsInt));
  LMC_RETURN_IF_ERROR(map.Required("block_size", &p.block_size, AsInt));
  LMC_RETURN_IF_ERROR(map.Required("num_layers", &p.num_layers, AsInt));
  LMC_RETURN_IF_ERROR(map.Required("hidden_dim_size", &p.hidden_dim_size, AsInt));
  LMC_RETURN_IF_ERROR(map.Required("dtype_str", &p.dtype_str, AsString));
  LMC_RETURN_IF_ERROR(map.Required("use_mla", &p.use_mla, AsBool));
  return p;
}

std::string EncodeFailureValue(FailureValue failure, std::string_view message) {
  Encoder e;
  switch (failure) {
    case FailureValue::kNil: e.Nil(); break;
    case FailureValue::kFalse: e.Bool(false); break;
    case FailureValue::kZero: e.Int(0); break;
    case FailureValue::kEmptyList: e.Array(0); break;
    case FailureValue::kStoreRetrieveFailure: e.Array(2).Bin("").Bool(false); break;
    case FailureValue::kEmptyPrepareStore:
      e.Map(1).Str("context").Map(2).Str("slots").Array(0).Str("chunk_indices").Array(0);
      break;
    case FailureValue::kFailedPrepareRetrieve:
      e.Map(3).Str("success").Bool(false).Str("data").Bin("").Str("context").Map(0);
      break;
    case FailureValue::kFailedRegistration:
      e.Map(3).Str("shm_name").Str("").Str("pool_size").Int(0).Str("error").Str(message);
      break;
  }
  return e.Take();
}

std::string EncodeErrorMap(const Status& status) {
  Encoder e;
  e.Map(2)
      .Str("code")
      .Int(static_cast<std::int64_t>(status.code()))
      .Str("message")
      .Str(status.message());
  return e.Take();
}

}  // namespace lmcache::server
