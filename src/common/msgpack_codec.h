// msgpack primitives shared by the server's codec and the client library.
//
// DecodeLimits bound what a decoder accepts (the streaming MsgpackCursor of
// common/msgpack_cursor.h decodes every request; msgpack_tree.h holds the
// tree reader that tools and tests use); Malformed() is their error;
// Encoder builds a value (its Str() repairs invalid UTF-8, so no reply can
// carry an undecodable str). Nothing here throws: msgpack-c's exceptions become
// Status values (kMalformedRequest, kTooLarge).
// Thread-safety: stateless functions; Encoder and MapWriter are plain values.
#pragma once

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::msgpk {

struct DecodeLimits {
  std::size_t max_frame_bytes = 64u << 20;  // one payload frame
  std::size_t max_array_items = 16u << 20;  // token lists of very long prompts
  std::size_t max_map_items = 256;
  std::size_t max_string_bytes = 1u << 20;
  std::size_t max_bin_bytes = 64u << 20;
  std::size_t max_depth = 8;
};

const DecodeLimits& DefaultDecodeLimits();

Status Malformed(std::string_view what, std::string_view why);
// Builds one msgpack value. Containers are written by announcing their size
// (Map(n) then n key/value pairs, Array(n) then n values).
class Encoder {
 public:
  Encoder() = default;
  // Writes into `buffer` after clearing it, keeping its capacity.
  explicit Encoder(std::string buffer) : buffer_(std::move(buffer)) { buffer_.clear(); }
  Encoder& Nil();
  Encoder& Bool(bool value);
  Encoder& Int(std::int64_t value);
  Encoder& Uint(std::uint64_t value);
  Encoder& Float(double value);
  Encoder& Str(std::string_view value);
  Encoder& Bin(std::string_view value);
  // An ext value of `type` (register_kv_cache's wrappers are ext 1).
  Encoder& Ext(std::int8_t type, std::string_view data);
  Encoder& Array(std::uint32_t size);
  // An array of unsigned ints (token ids), each in its shortest form: the
  // same bytes as Array(n) and n Uint() calls, written in one pass.
  Encoder& UintArray(std::span<const std::uint32_t> values);
  Encoder& Map(std::uint32_t size);
  // Appends bytes that already are one encoded msgpack value.
  Encoder& Raw(std::string_view encoded) {
    buffer_.append(encoded);
    return *this;
  }
  const std::string& bytes() const { return buffer_; }
  std::string Take() { return std::move(buffer_); }

 private:
  std::string buffer_;
};

// Builds a map whose size is the number of fields written, so adding a field
// can never leave a stale count behind: each Field() writes the key and
// returns the Encoder for exactly one value.
class MapWriter {
 public:
  Encoder& Field(std::string_view name) {
    entries_ += 1;
    return body_.Str(name);
  }
  std::uint32_t size() const { return entries_; }
  std::string Take() {
    Encoder out;
    out.Map(entries_).Raw(body_.bytes());
    return out.Take();
  }

 private:
  Encoder body_;
  std::uint32_t entries_ = 0;
};

}  // namespace lmcache::msgpk
