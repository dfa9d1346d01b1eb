// MsgpackCursor: a forward-only msgpack reader over one frame, for hot paths.
//
// msgpack-c builds an object tree for every value; for a lookup key that is
// 131072 tokens long that costs ~3 ms. The cursor reads values in place
// instead: the caller asks for the type it expects, and the cursor checks the
// type, the bounds of the frame and the limits (DecodeLimits) before it reads.
// Skip() steps over any value (unknown map keys) within the depth limit.
// Strings must be valid UTF-8 (as the reference's msgspec requires). Every
// error is a Status (kMalformedRequest or kTooLarge); nothing throws, no read
// goes past the frame, and nothing is allocated for a value the caller did
// not ask for (Skip() walks a value in place), so a request costs memory in
// proportion to what is kept from it, not to its size.
// Thread-safety: a plain value over bytes the caller keeps alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/msgpack_codec.h"
#include "lmcache/status.h"

namespace lmcache::msgpk {

class MsgpackCursor {
 public:
  MsgpackCursor(std::string_view frame, const DecodeLimits& limits = DefaultDecodeLimits())
      : data_(frame), limits_(&limits) {}

  bool AtEnd() const { return pos_ == data_.size(); }
  bool NextIsNil() const { return pos_ < data_.size() && Byte(pos_) == 0xc0; }
  bool NextIsStr() const {
    if (pos_ >= data_.size()) return false;
    const std::uint8_t b = Byte(pos_);
    return (b & 0xe0) == 0xa0 || b == 0xd9 || b == 0xda || b == 0xdb;
  }

  bool NextIsInt() const;
  bool NextIsArray() const {
    if (pos_ >= data_.size()) return false;
    const std::uint8_t b = Byte(pos_);
    return (b & 0xf0) == 0x90 || b == 0xdc || b == 0xdd;
  }
  std::size_t position() const { return pos_; }

  Result<std::uint32_t> ReadMapHeader(std::string_view what);
  Result<std::uint32_t> ReadArrayHeader(std::string_view what);
  // A str (keys and text fields), valid UTF-8.
  Result<std::string_view> ReadStr(std::string_view what);
  // A signed integer (bool accepted, as msgspec coerces it).
  Result<std::int64_t> ReadInt(std::string_view what);
  // A non-negative integer up to 2^64 - 1.
  Result<std::uint64_t> ReadUint(std::string_view what);
  Result<bool> ReadBool(std::string_view what);
  // A finite float (float32, float64, or an integer, as msgspec coerces it).
  Result<double> ReadFloat(std::string_view what);
  // A bin (or a str, which older encoders produce for bytes).
  Result<std::string_view> ReadBytes(std::string_view what);
  // An ext value: its type code and its data.
  Result<std::pair<std::int8_t, std::string_view>> ReadExt(std::string_view what);
  // An array of unsigned ints that fit 32 bits (token ids).
  Result<std::vector<std::uint32_t>> ReadUint32Array(std::string_view what);
  Status ReadNil(std::string_view what);
  // Steps over one value of any type.
  Status Skip();

  // Reads a map keyed by field name: `field(name)` is called for each str key
  // with the cursor on its value, and either reads the value and returns
  // true, or returns false to have it skipped. Non-str keys are skipped with
  // their values.
  Status ReadFields(std::string_view what,
                    const std::function<Result<bool>(std::string_view name)>& field);
 private:
  std::uint8_t Byte(std::size_t at) const { return static_cast<std::uint8_t>(data_[at]); }
  bool Has(std::size_t bytes) const { return data_.size() - pos_ >= bytes; }
  std::uint64_t BigEndian(std::size_t at, std::size_t bytes) const;
  Status Truncated(std::string_view what) const;
  Status SkipDepth(std::size_t depth);
  Result<std::uint32_t> ReadContainerHeader(std::string_view what, bool map);

  std::string_view data_;
  std::size_t pos_ = 0;
  const DecodeLimits* limits_;
};

}  // namespace lmcache::msgpk
