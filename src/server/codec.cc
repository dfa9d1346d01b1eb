#include "server/codec.h"

#include <limits>

namespace lmcache::server {
namespace {

using msgpack::type::object_type;
using mp::AsBool;
using mp::AsBytes;
using mp::AsFloat;
using mp::AsInt;
using mp::AsString;
using mp::Malformed;
using mp::MapReader;
using mp::Parse;
using mp::WrongType;

Result<std::vector<std::uint32_t>> AsTokenIds(const msgpack::object& o, std::string_view what) {
  if (o.type != object_type::ARRAY) return WrongType(what, "array of int", o);
  std::vector<std::uint32_t> tokens(o.via.array.size);
  for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
    const msgpack::object& item = o.via.array.ptr[i];
    if (item.type != object_type::POSITIVE_INTEGER || item.via.u64 > UINT32_MAX) {
      return Malformed(what, "token " + std::to_string(i) + " is not an integer in [0, 2^32)");
    }
    tokens[i] = static_cast<std::uint32_t>(item.via.u64);
  }
  return tokens;
}

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
      return Status(ErrorCode::kUnknownOperation, "unknown operation id " + std::to_string(o.via.u64));
    }
    const std::int64_t id = o.type == object_type::POSITIVE_INTEGER
                                ? static_cast<std::int64_t>(o.via.u64)
                                : o.via.i64;
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

Result<IpcKey> DecodeIpcKey(std::string_view frame) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(frame, "key"));
  LMC_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(handle.get(), "key"));
  IpcKey key;
  LMC_RETURN_IF_ERROR(map.Required("model_name", &key.model_name, AsString));
  LMC_RETURN_IF_ERROR(map.Required("world_size", &key.world_size, AsInt));
  if (const msgpack::object* worker = map.Field("worker_id");
      worker == nullptr) {
    return Malformed("key", "missing required field 'worker_id' (nil for all ranks)");
  } else if (worker->type != object_type::NIL) {
    LMC_ASSIGN_OR_RETURN(key.worker_id, AsInt(*worker, "key.worker_id"));
  }
  LMC_RETURN_IF_ERROR(map.Required("token_ids", &key.token_ids, AsTokenIds));
  LMC_RETURN_IF_ERROR(map.Required("start", &key.start, AsInt));
  LMC_RETURN_IF_ERROR(map.Required("end", &key.end, AsInt));
  LMC_RETURN_IF_ERROR(map.Required("request_id", &key.request_id, AsString));
  LMC_RETURN_IF_ERROR(map.Optional("cache_salt", &key.cache_salt, AsString));
  LMC_RETURN_IF_ERROR(map.Optional("num_kv_readers", &key.num_kv_readers, AsInt));
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
  e.Map(2).Str("code").Int(static_cast<std::int64_t>(status.code())).Str("message").Str(
      status.message());
  return e.Take();
}

}  // namespace lmcache::server
