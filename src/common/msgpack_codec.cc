#include "common/msgpack_codec.h"

#include "common/uint_windows.h"
#include "common/utf8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>

namespace lmcache::msgpk {
namespace {

// Adapter so msgpack::packer appends to a std::string.
struct StringWriter {
  std::string* out;
  void write(const char* data, std::size_t size) { out->append(data, size); }
};

}  // namespace

const DecodeLimits& DefaultDecodeLimits() {
  static const DecodeLimits kLimits;
  return kLimits;
}

Status Malformed(std::string_view what, std::string_view why) {
  return Status(ErrorCode::kMalformedRequest, std::string(what) + ": " + std::string(why));
}


#define LMC_PACK(expr)                        \
  do {                                        \
    StringWriter writer{&buffer_};            \
    msgpack::packer<StringWriter> pk(writer); \
    pk.expr;                                  \
  } while (0)

Encoder& Encoder::Nil() {
  LMC_PACK(pack_nil());
  return *this;
}
Encoder& Encoder::Bool(bool value) {
  if (value) {
    LMC_PACK(pack_true());
  } else {
    LMC_PACK(pack_false());
  }
  return *this;
}
Encoder& Encoder::Int(std::int64_t value) {
  LMC_PACK(pack_int64(value));
  return *this;
}
Encoder& Encoder::Uint(std::uint64_t value) {
  LMC_PACK(pack_uint64(value));
  return *this;
}
static_assert(std::endian::native == std::endian::little, "UintArray writes little-endian words");

namespace {

// Token ids are encoded 8 at a time: where the 8 share one form (a prompt's
// ids mostly fall in one tokenizer range) they are written without choosing
// a form per id; otherwise each id picks its own, without a branch.
constexpr std::size_t kGroup = 8;

// Writes `v` in its shortest form at `out`, as one 8-byte store; returns its length.
std::size_t PutShortest(char* out, std::uint32_t v) {
  // Branch-free: token ids are random in size, so a branch per form mispredicts.
  const std::uint64_t forms[4] = {
      v,                                                                       // fixint
      0xccu | (static_cast<std::uint64_t>(v) << 8),                            // uint8
      0xcdu | (static_cast<std::uint64_t>(__builtin_bswap16(static_cast<std::uint16_t>(v))) << 8),
      0xceu | (static_cast<std::uint64_t>(__builtin_bswap32(v)) << 8),        // uint32
  };
  const unsigned form = static_cast<unsigned>(v > 0x7f) + static_cast<unsigned>(v > 0xff) +
                        static_cast<unsigned>(v > 0xffff);
  std::memcpy(out, &forms[form], sizeof(std::uint64_t));  // little-endian: byte 0 first
  return (0x05030201u >> (form * 8)) & 0xff;               // lengths 1, 2, 3, 5
}

// Writes a group of kGroup ids that all take one form; returns the bytes
// written, or 0 when they do not share one.
std::size_t PutGroup(char* out, const std::uint32_t* v) {
  std::uint32_t low = v[0];
  std::uint32_t high = v[0];
  for (std::size_t k = 1; k < kGroup; ++k) {
    low = std::min(low, v[k]);
    high = std::max(high, v[k]);
  }
  if (low > 0xffff) {  // all uint32
    for (std::size_t k = 0; k < kGroup; ++k) {
      const std::uint64_t word = 0xceu | static_cast<std::uint64_t>(__builtin_bswap32(v[k])) << 8;
      std::memcpy(out + k * 5, &word, sizeof(word));
    }
    return kGroup * 5;
  }
  if (low > 0xff && high <= 0xffff) {  // all uint16
    for (std::size_t k = 0; k < kGroup; ++k) {
      const std::uint32_t word =
          0xcdu | static_cast<std::uint32_t>(__builtin_bswap16(static_cast<std::uint16_t>(v[k]))) << 8;
      std::memcpy(out + k * 3, &word, sizeof(word));
    }
    return kGroup * 3;
  }
  return 0;
}

}  // namespace

Encoder& Encoder::UintArray(std::span<const std::uint32_t> values) {
  Array(static_cast<std::uint32_t>(values.size()));
  const std::size_t start = buffer_.size();
  // The longest form is 5 bytes (0xce + 4); each value is written as one
  // 8-byte store, so 3 bytes of slack follow the last one, and 12 at a time
  // as one 64-byte store where the CPU can.
  const bool windows = UintWindowsEncodeAvailable();
  buffer_.resize(start + values.size() * 5 + (windows ? kUintWindowBytes : 3));
  char* out = buffer_.data() + start;
  std::size_t i = 0;
  if (windows) {
    out += EncodeUintWindows(values.data(), values.size(), out);
    i = values.size() / kUintEncodeGroup * kUintEncodeGroup;
  }
  for (; i + kGroup <= values.size(); i += kGroup) {
    const std::size_t written = PutGroup(out, values.data() + i);
    if (written > 0) {
      out += written;
      continue;
    }
    for (std::size_t k = 0; k < kGroup; ++k) out += PutShortest(out, values[i + k]);
  }
  for (; i < values.size(); ++i) out += PutShortest(out, values[i]);
  buffer_.resize(static_cast<std::size_t>(out - buffer_.data()));
  return *this;
}

Encoder& Encoder::Float(double value) {
  // msgpack-c's pack_double writes whole numbers as integers; a float field
  // must stay a float64 on the wire (0xcb + 8 big-endian bytes).
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  buffer_.push_back(static_cast<char>(0xcb));
  for (int shift = 56; shift >= 0; shift -= 8) buffer_.push_back(static_cast<char>(bits >> shift));
  return *this;
}
Encoder& Encoder::Str(std::string_view value) {
  // A str must be UTF-8 (clients decode strictly); text that came from a
  // request may not be, so repair it rather than produce an undecodable reply.
  if (!IsValidUtf8(value)) return Str(RepairUtf8(value));
  StringWriter writer{&buffer_};
  msgpack::packer<StringWriter> pk(writer);
  pk.pack_str(static_cast<std::uint32_t>(value.size()));
  pk.pack_str_body(value.data(), static_cast<std::uint32_t>(value.size()));
  return *this;
}
Encoder& Encoder::Bin(std::string_view value) {
  StringWriter writer{&buffer_};
  msgpack::packer<StringWriter> pk(writer);
  pk.pack_bin(static_cast<std::uint32_t>(value.size()));
  pk.pack_bin_body(value.data(), static_cast<std::uint32_t>(value.size()));
  return *this;
}
Encoder& Encoder::Ext(std::int8_t type, std::string_view data) {
  StringWriter writer{&buffer_};
  msgpack::packer<StringWriter> pk(writer);
  pk.pack_ext(data.size(), type);
  pk.pack_ext_body(data.data(), static_cast<std::uint32_t>(data.size()));
  return *this;
}
Encoder& Encoder::Array(std::uint32_t size) {
  LMC_PACK(pack_array(size));
  return *this;
}
Encoder& Encoder::Map(std::uint32_t size) {
  LMC_PACK(pack_map(size));
  return *this;
}

#undef LMC_PACK

}  // namespace lmcache::msgpk
