// The msgpack tree reader: Parse() reads one complete msgpack value with size
// and depth limits (and no trailing bytes) into msgpack-c's object tree; the
// As*() helpers convert a value with a type check that names the field;
// MapReader reads name-keyed structs the way the reference's msgspec does
// (unknown keys ignored, missing optional fields defaulted). The server does
// not use it (requests are decoded by the streaming MsgpackCursor, without a
// tree); the client tools read `stats` replies with it, and tests read
// replies. Nothing here throws: msgpack-c's exceptions become Status values.
// Thread-safety: stateless functions; MapReader is a plain value that borrows
// the tree it reads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/msgpack_codec.h"

namespace lmcache::msgpk {

Result<msgpack::object_handle> Parse(std::string_view frame, std::string_view what,
                                     const DecodeLimits& limits = DefaultDecodeLimits());

Status WrongType(std::string_view what, std::string_view expected, const msgpack::object& o);
Result<std::int64_t> AsInt(const msgpack::object& o, std::string_view what);
Result<std::uint64_t> AsUint(const msgpack::object& o, std::string_view what);
Result<bool> AsBool(const msgpack::object& o, std::string_view what);
Result<double> AsFloat(const msgpack::object& o, std::string_view what);
Result<std::string> AsString(const msgpack::object& o, std::string_view what);
// bin, or str (which older encoders produce for bytes).
Result<std::string> AsBytes(const msgpack::object& o, std::string_view what);

// Reads a map keyed by field name.
class MapReader {
 public:
  static Result<MapReader> Make(const msgpack::object& o, std::string_view what);
  const msgpack::object* Field(std::string_view name) const;
  template <typename T, typename Fn>
  Status Required(std::string_view name, T* out, Fn convert) const {
    const msgpack::object* field = Field(name);
    if (field == nullptr) {
      return Malformed(what_, "missing required field '" + std::string(name) + "'");
    }
    LMC_ASSIGN_OR_RETURN(*out, convert(*field, Name(name)));
    return Status::Ok();
  }
  // A missing or nil field keeps *out as it is (its default).
  template <typename T, typename Fn>
  Status Optional(std::string_view name, T* out, Fn convert) const {
    const msgpack::object* field = Field(name);
    if (field == nullptr || field->type == msgpack::type::NIL) return Status::Ok();
    LMC_ASSIGN_OR_RETURN(*out, convert(*field, Name(name)));
    return Status::Ok();
  }

 private:
  MapReader(const msgpack::object& map, std::string_view what) : map_(&map), what_(what) {}
  std::string Name(std::string_view field) const {
    return std::string(what_) + "." + std::string(field);
  }
  const msgpack::object* map_;
  std::string what_;
};

}  // namespace lmcache::msgpk
