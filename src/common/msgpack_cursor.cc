#include "common/msgpack_cursor.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "common/uint_windows.h"
#include "common/utf8.h"

namespace lmcache::msgpk {

std::uint64_t MsgpackCursor::BigEndian(std::size_t at, std::size_t bytes) const {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i) value = (value << 8) | Byte(at + i);
  return value;
}

Status MsgpackCursor::Truncated(std::string_view what) const {
  return Malformed(what, "truncated msgpack at byte " + std::to_string(pos_));
}

Result<std::uint32_t> MsgpackCursor::ReadContainerHeader(std::string_view what, bool map) {
  if (!Has(1)) return Truncated(what);
  const std::uint8_t b = Byte(pos_);
  std::uint64_t count = 0;
  std::size_t header = 1;
  if (map && (b & 0xf0) == 0x80) {
    count = b & 0x0f;
  } else if (!map && (b & 0xf0) == 0x90) {
    count = b & 0x0f;
  } else if (b == (map ? 0xde : 0xdc)) {
    header = 3;
  } else if (b == (map ? 0xdf : 0xdd)) {
    header = 5;
  } else {
    return Malformed(what, map ? "expected map" : "expected array");
  }
  if (!Has(header)) return Truncated(what);
  if (header > 1) count = BigEndian(pos_ + 1, header - 1);
  if (count > (map ? limits_->max_map_items : limits_->max_array_items)) {
    return Status(ErrorCode::kTooLarge,
                  std::string(what) + ": " + std::to_string(count) + " items exceed the limit");
  }
  // Each item takes at least one byte (two for a map entry): a cheap bound
  // that rejects a lying header before anything is allocated for it.
  if (count * (map ? 2 : 1) > data_.size() - pos_ - header) return Truncated(what);
  pos_ += header;
  return static_cast<std::uint32_t>(count);
}

Result<std::uint32_t> MsgpackCursor::ReadMapHeader(std::string_view what) {
  return ReadContainerHeader(what, /*map=*/true);
}

Result<std::uint32_t> MsgpackCursor::ReadArrayHeader(std::string_view what) {
  return ReadContainerHeader(what, /*map=*/false);
}

Result<std::string_view> MsgpackCursor::ReadStr(std::string_view what) {
  if (!Has(1)) return Truncated(what);
  const std::uint8_t b = Byte(pos_);
  std::size_t header = 1;
  std::uint64_t length = 0;
  if ((b & 0xe0) == 0xa0) {
    length = b & 0x1f;
  } else if (b == 0xd9 || b == 0xda || b == 0xdb) {
    header = 1 + (std::size_t{1} << (b - 0xd9));
    if (!Has(header)) return Truncated(what);
    length = BigEndian(pos_ + 1, header - 1);
  } else {
    return Malformed(what, "expected str");
  }
  if (length > limits_->max_string_bytes) {
    return Status(ErrorCode::kTooLarge, std::string(what) + ": string over the limit");
  }
  if (!Has(header + length)) return Truncated(what);
  const std::string_view text = data_.substr(pos_ + header, length);
  if (!IsValidUtf8(text)) return Malformed(what, "str is not valid UTF-8");
  pos_ += header + length;
  return text;
}

bool MsgpackCursor::NextIsInt() const {
  if (pos_ >= data_.size()) return false;
  const std::uint8_t b = Byte(pos_);
  return b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3);
}

Result<std::uint64_t> MsgpackCursor::ReadUint(std::string_view what) {
  if (Has(9) && Byte(pos_) == 0xcf) {
    const std::uint64_t value = BigEndian(pos_ + 1, 8);
    pos_ += 9;
    return value;
  }
  LMC_ASSIGN_OR_RETURN(const std::int64_t value, ReadInt(what));
  if (value < 0) return Malformed(what, "expected a non-negative integer");
  return static_cast<std::uint64_t>(value);
}

Result<double> MsgpackCursor::ReadFloat(std::string_view what) {
  if (!Has(1)) return Truncated(what);
  const std::uint8_t b = Byte(pos_);
  double value = 0;
  if (b == 0xca) {
    if (!Has(5)) return Truncated(what);
    value = std::bit_cast<float>(static_cast<std::uint32_t>(BigEndian(pos_ + 1, 4)));
    pos_ += 5;
  } else if (b == 0xcb) {
    if (!Has(9)) return Truncated(what);
    value = std::bit_cast<double>(BigEndian(pos_ + 1, 8));
    pos_ += 9;
  } else {
    LMC_ASSIGN_OR_RETURN(const std::int64_t integer, ReadInt(what));
    return static_cast<double>(integer);
  }
  if (!std::isfinite(value)) return Malformed(what, "not a finite number");
  return value;
}

Result<std::string_view> MsgpackCursor::ReadBytes(std::string_view what) {
  if (NextIsStr()) return ReadStr(what);
  if (!Has(1)) return Truncated(what);
  const std::uint8_t b = Byte(pos_);
  if (b < 0xc4 || b > 0xc6) return Malformed(what, "expected bin");
  const std::size_t header = 1 + (std::size_t{1} << (b - 0xc4));
  if (!Has(header)) return Truncated(what);
  const std::uint64_t length = BigEndian(pos_ + 1, header - 1);
  if (length > limits_->max_bin_bytes) {
    return Status(ErrorCode::kTooLarge, std::string(what) + ": bin over the limit");
  }
  if (!Has(header + length)) return Truncated(what);
  const std::string_view bytes = data_.substr(pos_ + header, length);
  pos_ += header + length;
  return bytes;
}

Result<std::pair<std::int8_t, std::string_view>> MsgpackCursor::ReadExt(std::string_view what) {
  if (!Has(1)) return Truncated(what);
  const std::uint8_t b = Byte(pos_);
  std::size_t header = 0;
  std::uint64_t length = 0;
  if (b >= 0xd4 && b <= 0xd8) {  // fixext 1, 2, 4, 8, 16
    header = 2;
    length = std::uint64_t{1} << (b - 0xd4);
  } else if (b >= 0xc7 && b <= 0xc9) {  // ext 8, 16, 32
    const std::size_t size_bytes = std::size_t{1} << (b - 0xc7);
    if (!Has(1 + size_bytes)) return Truncated(what);
    length = BigEndian(pos_ + 1, size_bytes);
    header = 2 + size_bytes;
  } else {
    return Malformed(what, "expected ext");
  }
  if (length > limits_->max_bin_bytes) {
    return Status(ErrorCode::kTooLarge, std::string(what) + ": ext over the limit");
  }
  if (!Has(header + length)) return Truncated(what);
  const auto type = static_cast<std::int8_t>(Byte(pos_ + header - 1));
  const std::string_view body = data_.substr(pos_ + header, length);
  pos_ += header + length;
  return std::make_pair(type, body);
}

Status MsgpackCursor::ReadFields(
    std::string_view what, const std::function<Result<bool>(std::string_view name)>& field) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t count, ReadMapHeader(what));
  for (std::uint32_t i = 0; i < count; ++i) {
    if (!NextIsStr()) {
      LMC_RETURN_IF_ERROR(Skip());  // key
      LMC_RETURN_IF_ERROR(Skip());  // value
      continue;
    }
    LMC_ASSIGN_OR_RETURN(const std::string_view name, ReadStr(what));
    LMC_ASSIGN_OR_RETURN(const bool read, field(name));
    if (!read) LMC_RETURN_IF_ERROR(Skip());
  }
  return Status::Ok();
}

Result<std::int64_t> MsgpackCursor::ReadInt(std::string_view what) {
  if (!Has(1)) return Truncated(what);
  const std::uint8_t b = Byte(pos_);
  if (b <= 0x7f) {
    pos_ += 1;
    return std::int64_t{b};
  }
  if (b >= 0xe0) {
    pos_ += 1;
    return static_cast<std::int64_t>(static_cast<std::int8_t>(b));
  }
  if (b == 0xc2 || b == 0xc3) {
    pos_ += 1;
    return std::int64_t{b == 0xc3 ? 1 : 0};
  }
  if (b < 0xcc || b > 0xd3) return Malformed(what, "expected int");
  const std::size_t bytes = std::size_t{1} << ((b - 0xcc) & 3);
  if (!Has(1 + bytes)) return Truncated(what);
  const std::uint64_t raw = BigEndian(pos_ + 1, bytes);
  pos_ += 1 + bytes;
  if (b <= 0xcf) {  // unsigned
    if (raw > static_cast<std::uint64_t>(INT64_MAX)) return Malformed(what, "integer out of range");
    return static_cast<std::int64_t>(raw);
  }
  const unsigned shift = static_cast<unsigned>(64 - 8 * bytes);  // sign-extend
  return static_cast<std::int64_t>(raw << shift) >> shift;
}

Result<bool> MsgpackCursor::ReadBool(std::string_view what) {
  if (Has(1) && (Byte(pos_) == 0xc2 || Byte(pos_) == 0xc3)) return Byte(pos_++) == 0xc3;
  LMC_ASSIGN_OR_RETURN(const std::int64_t value, ReadInt(what));
  if (value != 0 && value != 1) return Malformed(what, "expected bool");
  return value == 1;
}

namespace {

// Token arrays are decoded a run of kRunItems at a time where the run's items
// all have one width (a prompt's ids mostly do: one tokenizer range, or the
// fixints of digits and punctuation). A run's item positions are known in
// advance, so its loads do not wait on each other; item by item, each
// position waits on the previous item's type byte.
constexpr std::size_t kRunItems = 8;
// Items decoded one by one after a failed run check (a mispredicted branch):
// codec_bench's mixed-width keys decode within a few % of a decoder without
// runs, keys of one width 2.5x faster.
constexpr std::uint32_t kScalarStretch = 32;

// True when the kRunItems items at `p`, `stride` bytes apart, all start with `type`.
bool IsRun(const std::uint8_t* p, std::uint8_t type, std::size_t stride) {
  bool same = true;
  for (std::size_t k = 0; k < kRunItems; ++k) same &= p[k * stride] == type;
  return same;
}

// Decodes one run at `p` into `out` if the next items form one; returns the
// bytes it consumed (0: not a run, or too few bytes left for one).
std::size_t DecodeRun(const std::uint8_t* p, std::size_t left, std::uint32_t* out) {
  if (left >= kRunItems * 5 && IsRun(p, 0xce, 5)) {  // uint32
    for (std::size_t k = 0; k < kRunItems; ++k) {
      std::uint32_t v;
      std::memcpy(&v, p + k * 5 + 1, sizeof(v));
      out[k] = __builtin_bswap32(v);
    }
    return kRunItems * 5;
  }
  if (left >= kRunItems * 3 && IsRun(p, 0xcd, 3)) {  // uint16
    for (std::size_t k = 0; k < kRunItems; ++k) {
      out[k] = static_cast<std::uint32_t>(p[k * 3 + 1]) << 8 | p[k * 3 + 2];
    }
    return kRunItems * 3;
  }
  if (left >= kRunItems) {  // positive fixints: one byte each, high bit clear
    std::uint64_t word;
    std::memcpy(&word, p, sizeof(word));
    if ((word & 0x8080808080808080ull) == 0) {
      for (std::size_t k = 0; k < kRunItems; ++k) out[k] = p[k];
      return kRunItems;
    }
  }
  return 0;
}

}  // namespace

Result<std::vector<std::uint32_t>> MsgpackCursor::ReadUint32Array(std::string_view what) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t count, ReadArrayHeader(what));
  std::vector<std::uint32_t> values(count);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(data_.data());
  const std::size_t size = data_.size();
  std::size_t pos = pos_;
  std::uint32_t i = 0;
  std::uint32_t scalar_until = 0;  // after a failed run check, item by item up to here
  const bool windows = UintWindowsAvailable();
  while (i < count) {
    if (i >= scalar_until && count - i >= kRunItems) {
      const std::size_t used = DecodeRun(bytes + pos, size - pos, values.data() + i);
      if (used > 0) {
        pos += used;
        i += kRunItems;
        continue;
      }
      if (windows && size - pos >= kUintWindowBytes) {
        // Mixed widths: 896 bytes at a time where the CPU can, item by item
        // only before an item of another form (taken or reported below).
        const UintWindowsResult done =
            DecodeUintWindows(bytes + pos, size - pos, values.data() + i, count - i);
        pos += done.bytes;
        i += static_cast<std::uint32_t>(done.items);
        if (i == count) break;  // what follows the array may well be of another form
        // Before an item of another form, the next ones go one by one (below):
        // a window's tables are never built again only to stop at it.
        if (done.items > 0 && !done.other_form) continue;
      }
      // Mixed widths here: the next items go one by one, so a prompt with no
      // runs pays one failed check per kScalarStretch items, not one per item.
      scalar_until = i + kScalarStretch;
    }
    // One item. Token ids are fixints (< 128), uint8, uint16 or uint32: each
    // form is read directly: with branches, because on ids of one dominant
    // width (the common case) they predict well, while a branch-free decode
    // lengthens the chain from one item's type byte to the next item's
    // position.
    if (pos >= size) return Truncated(what);
    const std::uint8_t b = bytes[pos];
    if (b <= 0x7f) {
      values[i] = b;
      pos += 1;
    } else if (b == 0xcd && size - pos >= 3) {
      values[i] = static_cast<std::uint32_t>(bytes[pos + 1]) << 8 | bytes[pos + 2];
      pos += 3;
    } else if (b == 0xce && size - pos >= 5) {
      values[i] = static_cast<std::uint32_t>(bytes[pos + 1]) << 24 |
                  static_cast<std::uint32_t>(bytes[pos + 2]) << 16 |
                  static_cast<std::uint32_t>(bytes[pos + 3]) << 8 | bytes[pos + 4];
      pos += 5;
    } else if (b == 0xcc && size - pos >= 2) {
      values[i] = bytes[pos + 1];
      pos += 2;
    } else if (b == 0xcf && size - pos >= 9 && BigEndian(pos + 1, 8) <= UINT32_MAX) {
      values[i] = static_cast<std::uint32_t>(BigEndian(pos + 1, 8));
      pos += 9;
    } else {
      pos_ = pos;
      if (b >= 0xcc && b <= 0xcf && !Has(std::size_t{1} + (std::size_t{1} << (b - 0xcc)))) {
        return Truncated(what);
      }
      return Malformed(what, "item " + std::to_string(i) + " is not an integer in [0, 2^32)");
    }
    ++i;
  }
  pos_ = pos;
  return values;
}

Status MsgpackCursor::ReadNil(std::string_view what) {
  if (!NextIsNil()) return Malformed(what, "expected nil");
  pos_ += 1;
  return Status::Ok();
}

Status MsgpackCursor::Skip() { return SkipDepth(0); }

Status MsgpackCursor::SkipDepth(std::size_t depth) {
  if (depth >= limits_->max_depth) return Status(ErrorCode::kTooLarge, "msgpack nested too deeply");
  if (!Has(1)) return Truncated("value");
  const std::uint8_t b = Byte(pos_);
  auto skip_bytes = [this](std::size_t n) -> Status {
    if (!Has(n)) return Truncated("value");
    pos_ += n;
    return Status::Ok();
  };
  auto skip_sized = [&](std::size_t header, std::size_t extra) -> Status {
    if (!Has(header)) return Truncated("value");
    const std::uint64_t length = BigEndian(pos_ + 1, header - 1);
    if (length > limits_->max_bin_bytes) return Status(ErrorCode::kTooLarge, "value over the limit");
    return skip_bytes(header + extra + length);
  };
  auto skip_items = [&](std::uint64_t items) -> Status {
    for (std::uint64_t i = 0; i < items; ++i) LMC_RETURN_IF_ERROR(SkipDepth(depth + 1));
    return Status::Ok();
  };
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return skip_bytes(1);
  if ((b & 0xe0) == 0xa0) return skip_bytes(1 + (b & 0x1f));  // fixstr
  if ((b & 0xf0) == 0x90 || b == 0xdc || b == 0xdd) {
    LMC_ASSIGN_OR_RETURN(const std::uint32_t n, ReadArrayHeader("array"));
    return skip_items(n);
  }
  if ((b & 0xf0) == 0x80 || b == 0xde || b == 0xdf) {
    LMC_ASSIGN_OR_RETURN(const std::uint32_t n, ReadMapHeader("map"));
    return skip_items(std::uint64_t{n} * 2);
  }
  switch (b) {
    case 0xcc:
    case 0xd0: return skip_bytes(2);
    case 0xcd:
    case 0xd1: return skip_bytes(3);
    case 0xce:
    case 0xd2:
    case 0xca: return skip_bytes(5);
    case 0xcf:
    case 0xd3:
    case 0xcb: return skip_bytes(9);
    case 0xd9:
    case 0xc4: return skip_sized(2, 0);  // str8, bin8
    case 0xda:
    case 0xc5: return skip_sized(3, 0);
    case 0xdb:
    case 0xc6: return skip_sized(5, 0);
    case 0xd4: return skip_bytes(3);  // fixext 1..16: type byte + data
    case 0xd5: return skip_bytes(4);
    case 0xd6: return skip_bytes(6);
    case 0xd7: return skip_bytes(10);
    case 0xd8: return skip_bytes(18);
    case 0xc7: return skip_sized(2, 1);  // ext8/16/32: length, type byte, data
    case 0xc8: return skip_sized(3, 1);
    case 0xc9: return skip_sized(5, 1);
    default: return Malformed("value", "invalid msgpack byte 0xc1");
  }
}

}  // namespace lmcache::msgpk
