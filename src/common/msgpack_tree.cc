#include "common/msgpack_tree.h"

#include <exception>
#include <limits>
#include <string>

namespace lmcache::msgpk {
namespace {

using msgpack::type::object_type;

std::string_view TypeName(object_type type) {
  switch (type) {
    case object_type::NIL: return "nil";
    case object_type::BOOLEAN: return "bool";
    case object_type::POSITIVE_INTEGER:
    case object_type::NEGATIVE_INTEGER: return "int";
    case object_type::FLOAT32:
    case object_type::FLOAT64: return "float";
    case object_type::STR: return "str";
    case object_type::BIN: return "bin";
    case object_type::ARRAY: return "array";
    case object_type::MAP: return "map";
    case object_type::EXT: return "ext";
  }
  return "unknown";
}

}  // namespace

Status WrongType(std::string_view what, std::string_view expected, const msgpack::object& o) {
  return Malformed(what,
                   "expected " + std::string(expected) + ", got " + std::string(TypeName(o.type)));
}

Result<msgpack::object_handle> Parse(std::string_view frame, std::string_view what,
                                     const DecodeLimits& limits) {
  if (frame.size() > limits.max_frame_bytes) {
    return Status(ErrorCode::kTooLarge, std::string(what) + ": frame of " +
                                            std::to_string(frame.size()) + " bytes exceeds " +
                                            std::to_string(limits.max_frame_bytes));
  }
  if (frame.empty()) return Malformed(what, "empty frame");
  const msgpack::unpack_limit limit(limits.max_array_items, limits.max_map_items,
                                    limits.max_string_bytes, limits.max_bin_bytes,
                                    limits.max_bin_bytes, limits.max_depth);
  try {
    std::size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(frame.data(), frame.size(), offset, nullptr, nullptr, limit);
    if (offset != frame.size()) {
      return Malformed(what, std::to_string(frame.size() - offset) + " trailing bytes");
    }
    return handle;
  } catch (const msgpack::depth_size_overflow&) {
    return Status(ErrorCode::kTooLarge, std::string(what) + ": nested too deeply");
  } catch (const msgpack::size_overflow& e) {
    return Status(ErrorCode::kTooLarge,
                  std::string(what) + ": over a decode limit (" + e.what() + ")");
  } catch (const std::exception& e) {
    return Malformed(what, std::string("undecodable msgpack (") + e.what() + ")");
  }
}

Result<std::int64_t> AsInt(const msgpack::object& o, std::string_view what) {
  switch (o.type) {
    case object_type::POSITIVE_INTEGER:
      if (o.via.u64 > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return Malformed(what, "integer out of range");
      }
      return static_cast<std::int64_t>(o.via.u64);
    case object_type::NEGATIVE_INTEGER: return o.via.i64;
    case object_type::BOOLEAN: return std::int64_t{o.via.boolean ? 1 : 0};
    default: return WrongType(what, "int", o);
  }
}

Result<bool> AsBool(const msgpack::object& o, std::string_view what) {
  if (o.type == object_type::BOOLEAN) return o.via.boolean;
  if (o.type == object_type::POSITIVE_INTEGER && o.via.u64 <= 1) return o.via.u64 == 1;
  return WrongType(what, "bool", o);
}

Result<double> AsFloat(const msgpack::object& o, std::string_view what) {
  if (o.type == object_type::FLOAT32 || o.type == object_type::FLOAT64) {
    if (!std::isfinite(o.via.f64)) return Malformed(what, "not a finite number");
    return o.via.f64;
  }
  LMC_ASSIGN_OR_RETURN(const std::int64_t value, AsInt(o, what));
  return static_cast<double>(value);
}

Result<std::string> AsString(const msgpack::object& o, std::string_view what) {
  if (o.type != object_type::STR) return WrongType(what, "str", o);
  return std::string(o.via.str.ptr, o.via.str.size);
}

Result<std::string> AsBytes(const msgpack::object& o, std::string_view what) {
  if (o.type == object_type::BIN) return std::string(o.via.bin.ptr, o.via.bin.size);
  if (o.type == object_type::STR) return std::string(o.via.str.ptr, o.via.str.size);
  return WrongType(what, "bin", o);
}

Result<std::uint64_t> AsUint(const msgpack::object& o, std::string_view what) {
  if (o.type == object_type::POSITIVE_INTEGER) return o.via.u64;
  LMC_ASSIGN_OR_RETURN(const std::int64_t value, AsInt(o, what));
  if (value < 0) return Malformed(what, "expected a non-negative integer");
  return static_cast<std::uint64_t>(value);
}

Result<MapReader> MapReader::Make(const msgpack::object& o, std::string_view what) {
  if (o.type != object_type::MAP) return WrongType(what, "map", o);
  return MapReader(o, what);
}

const msgpack::object* MapReader::Field(std::string_view name) const {
  for (std::uint32_t i = 0; i < map_->via.map.size; ++i) {
    const msgpack::object_kv& kv = map_->via.map.ptr[i];
    if (kv.key.type == object_type::STR &&
        std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == name) {
      return &kv.val;
    }
  }
  return nullptr;
}

}  // namespace lmcache::msgpk
