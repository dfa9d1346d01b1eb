#include "tier/payload_codec.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace lmcache::tier {
namespace {

// One fp8 format, as torch defines it (c10/util/Float8_e4m3fn.h, Float8_e5m2.h).
struct Fp8Format {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  float overflow_from;  // |value| at or past this casts to overflow_code
  std::uint8_t overflow_code;
  bool has_infinity;  // e5m2: exponent all ones, mantissa 0; e4m3fn has none
};

constexpr Fp8Format kE4M3{4, 3, 7, 480.0f, 0x7F, false};
constexpr Fp8Format kE5M2{5, 2, 15, 65536.0f, 0x7C, true};
constexpr std::uint8_t kNanCode = 0x7F;  // both formats' (positive) NaN

const Fp8Format& FormatOf(PayloadCodec codec) {
  return codec == PayloadCodec::kFp8E5M2 ? kE5M2 : kE4M3;
}

float SubnormalStep(const Fp8Format& f) { return std::ldexp(1.0f, 1 - f.bias - f.mantissa_bits); }

// The fp8 code of a float given by its bits, without a branch.
//  - Normal results: rebias the exponent in the float's own bits, then drop
//    the mantissa bits fp8 has no room for, rounding to nearest, ties to
//    even (a carry runs into the exponent, as it should).
//  - Subnormal results: adding 2^(23 + log2 step) makes the float unit's own
//    rounding (to nearest, ties to even) round the value to a whole number
//    of subnormal steps, which the sum's low bits then count.
//  - Past the range: the format's overflow code; NaN stays NaN.
template <const Fp8Format& f>
std::uint8_t EncodeBits(std::uint32_t bits) {
  const int shift = 23 - f.mantissa_bits;
  const std::uint32_t sign = (bits >> 24) & 0x80;
  const std::uint32_t magnitude = bits & 0x7FFFFFFF;
  const std::uint32_t rebiased = magnitude - (static_cast<std::uint32_t>(127 - f.bias) << 23);
  const std::uint32_t normal =
      (rebiased + ((1u << (shift - 1)) - 1) + ((magnitude >> shift) & 1)) >> shift;
  const float rounder =  // 2^23 * step
      std::bit_cast<float>(static_cast<std::uint32_t>(151 - f.bias - f.mantissa_bits) << 23);
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(
                                      std::bit_cast<float>(magnitude) + rounder) -
                                  std::bit_cast<std::uint32_t>(rounder);
  const std::uint32_t min_normal = static_cast<std::uint32_t>(128 - f.bias) << 23;
  std::uint32_t code = magnitude < min_normal ? subnormal : normal;
  code = magnitude >= std::bit_cast<std::uint32_t>(f.overflow_from) ? f.overflow_code : code;
  code = magnitude > 0x7F800000 ? kNanCode : code;
  return static_cast<std::uint8_t>(sign | code);
}

std::uint8_t Encode(const Fp8Format& f, float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  return &f == &kE5M2 ? EncodeBits<kE5M2>(bits) : EncodeBits<kE4M3>(bits);
}

// `raw`'s 32-bit (float) elements into `codes`; the format a template
// argument, so that the loop's constants are constants.
template <const Fp8Format& f>
void EncodeFloats(std::span<const std::byte> raw, std::uint8_t* codes, std::size_t elements) {
  for (std::size_t i = 0; i < elements; ++i) {
    std::uint32_t v;
    std::memcpy(&v, raw.data() + 4 * i, 4);
    codes[i] = EncodeBits<f>(v);
  }
}

float Decode(const Fp8Format& f, std::uint8_t code) {
  const bool negative = (code & 0x80) != 0;
  const int exponent_mask = (1 << f.exponent_bits) - 1;
  const int mantissa_mask = (1 << f.mantissa_bits) - 1;
  const int exponent = (code >> f.mantissa_bits) & exponent_mask;
  const int mantissa = code & mantissa_mask;
  float magnitude;
  if (f.has_infinity && exponent == exponent_mask) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (!f.has_infinity && exponent == exponent_mask && mantissa == mantissa_mask) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * SubnormalStep(f);
  } else {
    magnitude =
        std::ldexp(1.0f + static_cast<float>(mantissa) / static_cast<float>(1 << f.mantissa_bits),
                   exponent - f.bias);
  }
  return negative ? -magnitude : magnitude;
}

float FloatFromHalfBits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1F;
  const std::uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  const std::uint32_t float_exponent = exponent == 0x1F ? 0xFF : exponent - 15 + 127;
  return std::bit_cast<float>(sign | (float_exponent << 23) | (mantissa << 13));
}

// The half (binary16) bits of a float that half holds exactly (every fp8 value).
std::uint16_t HalfBitsOfExact(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000);
  const float a = std::fabs(value);
  if (std::isnan(value)) return sign | 0x7E00;
  if (std::isinf(value)) return sign | 0x7C00;
  if (a < std::ldexp(1.0f, -14)) {
    return sign | static_cast<std::uint16_t>(a / std::ldexp(1.0f, -24));
  }
  const std::uint32_t magnitude = bits & 0x7FFFFFFF;
  const std::uint32_t exponent = (magnitude >> 23) - 127 + 15;
  return sign | static_cast<std::uint16_t>((exponent << 10) | ((magnitude >> 13) & 0x3FF));
}

// bfloat16 bits of a float bfloat16 holds exactly; NaN as torch casts it.
std::uint16_t BFloat16BitsOfExact(float value) {
  if (std::isnan(value)) return 0x7FC0;
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(value) >> 16);
}

// Every fp8 code's value in the three destination types.
struct DecodeTable {
  std::array<std::uint32_t, 256> float32;
  std::array<std::uint16_t, 256> float16;
  std::array<std::uint16_t, 256> bfloat16;
};

DecodeTable MakeDecodeTable(const Fp8Format& f) {
  DecodeTable t{};
  for (int code = 0; code < 256; ++code) {
    const float v = Decode(f, static_cast<std::uint8_t>(code));
    t.float32[code] = std::bit_cast<std::uint32_t>(v);
    t.float16[code] = HalfBitsOfExact(v);
    t.bfloat16[code] = BFloat16BitsOfExact(v);
  }
  return t;
}

const DecodeTable& DecodeTableOf(PayloadCodec codec) {
  static const DecodeTable e4m3 = MakeDecodeTable(kE4M3);
  static const DecodeTable e5m2 = MakeDecodeTable(kE5M2);
  return codec == PayloadCodec::kFp8E5M2 ? e5m2 : e4m3;
}

// The fp8 code of every 16-bit source value: a store reads one table entry
// an element.
using EncodeTable = std::vector<std::uint8_t>;

EncodeTable MakeEncodeTable(const Fp8Format& f, float (*to_float)(std::uint16_t)) {
  EncodeTable t(65536);
  for (std::uint32_t v = 0; v < 65536; ++v)
    t[v] = Encode(f, to_float(static_cast<std::uint16_t>(v)));
  return t;
}

float FloatFromBFloat16Bits(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

const EncodeTable& EncodeTableOf(PayloadCodec codec, ElementType element) {
  static const EncodeTable e4m3_bf16 = MakeEncodeTable(kE4M3, FloatFromBFloat16Bits);
  static const EncodeTable e4m3_f16 = MakeEncodeTable(kE4M3, FloatFromHalfBits);
  static const EncodeTable e5m2_bf16 = MakeEncodeTable(kE5M2, FloatFromBFloat16Bits);
  static const EncodeTable e5m2_f16 = MakeEncodeTable(kE5M2, FloatFromHalfBits);
  const bool e5m2 = codec == PayloadCodec::kFp8E5M2;
  if (element == ElementType::kBFloat16) return e5m2 ? e5m2_bf16 : e4m3_bf16;
  return e5m2 ? e5m2_f16 : e4m3_f16;
}

template <typename T>
void DecodeBackwards(const std::array<T, 256>& table, std::span<std::byte> buffer,
                     std::size_t elements) {
  // Element i is written at i * sizeof(T) >= i: walking from the last one, a
  // write never reaches a code not read yet.
  auto* codes = reinterpret_cast<const std::uint8_t*>(buffer.data());
  for (std::size_t i = elements; i-- > 0;) {
    const T value = table[codes[i]];
    std::memcpy(buffer.data() + i * sizeof(T), &value, sizeof(T));
  }
}

Status CorruptEncoding(const std::string& what) {
  return Status(ErrorCode::kCorrupt, "L2 object encoding: " + what);
}

}  // namespace

const char* PayloadCodecName(PayloadCodec codec) {
  switch (codec) {
    case PayloadCodec::kRaw: return "raw";
    case PayloadCodec::kFp8E4M3: return "fp8-e4m3";
    case PayloadCodec::kFp8E5M2: return "fp8-e5m2";
  }
  return "unknown";
}

const char* ElementTypeName(ElementType element) {
  switch (element) {
    case ElementType::kBFloat16: return "bfloat16";
    case ElementType::kFloat16: return "float16";
    case ElementType::kFloat32: return "float32";
    case ElementType::kUnknown: break;
  }
  return "unknown";
}

ElementType ElementTypeOfDtype(std::string_view dtype) {
  if (dtype.starts_with("torch.")) dtype.remove_prefix(6);
  if (dtype == "bfloat16" || dtype == "bf16") return ElementType::kBFloat16;
  if (dtype == "float16" || dtype == "half" || dtype == "fp16") return ElementType::kFloat16;
  if (dtype == "float32" || dtype == "float" || dtype == "fp32") return ElementType::kFloat32;
  return ElementType::kUnknown;
}

std::size_t ElementBytes(ElementType element) {
  switch (element) {
    case ElementType::kBFloat16:
    case ElementType::kFloat16: return 2;
    case ElementType::kFloat32: return 4;
    case ElementType::kUnknown: break;
  }
  return 0;
}

Result<std::uint64_t> EncodedBytes(PayloadCodec codec, ElementType element,
                                   std::uint64_t raw_bytes) {
  if (codec == PayloadCodec::kRaw) return raw_bytes;
  const std::size_t item = ElementBytes(element);
  if (item == 0) {
    return Status(ErrorCode::kInvalidArgument, std::string(PayloadCodecName(codec)) +
                                                   " needs bfloat16, float16 or float32 elements");
  }
  if (raw_bytes % item != 0) {
    return Status(ErrorCode::kInvalidArgument, std::to_string(raw_bytes) + " bytes are not whole " +
                                                   ElementTypeName(element) + " elements");
  }
  return raw_bytes / item;  // one byte an element
}

Status EncodePayload(PayloadCodec codec, ElementType element, std::span<const std::byte> raw,
                     std::span<std::byte> out) {
  LMC_ASSIGN_OR_RETURN(const std::uint64_t want, EncodedBytes(codec, element, raw.size()));
  if (out.size() != want) {
    return Status(ErrorCode::kInvalidArgument, "encoded buffer of " + std::to_string(out.size()) +
                                                   " bytes, the payload needs " +
                                                   std::to_string(want));
  }
  if (codec == PayloadCodec::kRaw) {
    std::memcpy(out.data(), raw.data(), raw.size());
    return Status::Ok();
  }
  auto* codes = reinterpret_cast<std::uint8_t*>(out.data());
  const std::size_t elements = out.size();
  switch (element) {
    case ElementType::kFloat32:
      if (codec == PayloadCodec::kFp8E5M2) {
        EncodeFloats<kE5M2>(raw, codes, elements);
      } else {
        EncodeFloats<kE4M3>(raw, codes, elements);
      }
      break;
    default: {
      // 16-bit elements through a table of every value's code: KV values
      // cluster, so the entries a tensor uses stay in cache, and a lookup an
      // element measured 3.4x faster than the arithmetic (serde_bench).
      const EncodeTable& table = EncodeTableOf(codec, element);
      for (std::size_t i = 0; i < elements; ++i) {
        std::uint16_t v;
        std::memcpy(&v, raw.data() + 2 * i, 2);
        codes[i] = table[v];
      }
    }
  }
  return Status::Ok();
}

Status CheckEncoding(const PayloadEncoding& encoding, std::uint64_t payload_bytes) {
  switch (encoding.codec) {
    case PayloadCodec::kRaw:
      if (encoding.raw_bytes != payload_bytes)
        return CorruptEncoding("raw size differs from payload");
      return Status::Ok();
    case PayloadCodec::kFp8E4M3:
    case PayloadCodec::kFp8E5M2: break;
    default:
      return CorruptEncoding("codec " + std::to_string(static_cast<int>(encoding.codec)) +
                             " is not one this server decodes");
  }
  auto want = EncodedBytes(encoding.codec, encoding.element, encoding.raw_bytes);
  if (!want.ok()) return CorruptEncoding(want.status().message());
  if (*want != payload_bytes) {
    return CorruptEncoding(std::to_string(payload_bytes) + " payload bytes, " +
                           std::to_string(*want) + " expected for " +
                           std::to_string(encoding.raw_bytes) + " raw bytes");
  }
  return Status::Ok();
}

void DecodePayloadInPlace(const PayloadEncoding& encoding, std::span<std::byte> buffer) {
  if (!encoding.encoded()) return;
  const DecodeTable& table = DecodeTableOf(encoding.codec);
  const std::size_t elements = buffer.size() / ElementBytes(encoding.element);
  switch (encoding.element) {
    case ElementType::kBFloat16: return DecodeBackwards(table.bfloat16, buffer, elements);
    case ElementType::kFloat16: return DecodeBackwards(table.float16, buffer, elements);
    case ElementType::kFloat32: return DecodeBackwards(table.float32, buffer, elements);
    case ElementType::kUnknown: return;
  }
}

std::uint8_t Fp8FromFloat(PayloadCodec codec, float value) {
  return Encode(FormatOf(codec), value);
}

float FloatFromFp8(PayloadCodec codec, std::uint8_t code) { return Decode(FormatOf(codec), code); }

}  // namespace lmcache::tier
