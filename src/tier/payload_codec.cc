#include "tier/payload_codec.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include <zstd.h>

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

// --- lossless ---------------------------------------------------------------

// The planes an object is split into: one a byte of its elements, or one
// plane where the element type is unknown (or does not divide the size).
std::size_t PlaneCount(ElementType element, std::uint64_t raw_bytes) {
  const std::size_t width = ElementBytes(element);
  return width == 0 || raw_bytes % width != 0 ? 1 : width;
}

constexpr std::size_t kFrameLengthBytes = 8;  // the compressed plane's length, first
constexpr int kZstdLevel = 1;  // measured: level 2 and 3 saved less on KV planes, slower

struct ZstdContexts {
  ZstdContexts() : compress(ZSTD_createCCtx()), decompress(ZSTD_createDCtx()) {}
  ~ZstdContexts() {
    ZSTD_freeCCtx(compress);
    ZSTD_freeDCtx(decompress);
  }
  ZstdContexts(const ZstdContexts&) = delete;
  ZstdContexts& operator=(const ZstdContexts&) = delete;
  ZSTD_CCtx* compress;
  ZSTD_DCtx* decompress;
};

// One pair a thread: a store worker or an adapter's thread reuses its own.
ZstdContexts& Zstd() {
  thread_local ZstdContexts contexts;
  return contexts;
}

// A thread's scratch for the planes of one object, kept between objects up
// to kKeptScratchBytes: a fresh buffer each time cost more in page faults
// than the planes' copies (serde_bench).
constexpr std::size_t kKeptScratchBytes = 64u << 20;

struct Scratch {
  std::unique_ptr<std::byte[]> bytes;
  std::size_t size = 0;
};

class ScratchLease {
 public:
  explicit ScratchLease(std::size_t size) {
    thread_local Scratch kept;
    if (kept.size >= size) {
      own_ = std::move(kept);
      kept.size = 0;  // moved out: a lease taken meanwhile gets its own
      kept_ = &kept;
    } else {
      own_.bytes = std::make_unique_for_overwrite<std::byte[]>(size);
      own_.size = size;
      if (size <= kKeptScratchBytes) kept_ = &kept;
    }
  }
  ~ScratchLease() {
    if (kept_ != nullptr) *kept_ = std::move(own_);
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  std::byte* data() { return own_.bytes.get(); }

 private:
  Scratch own_;
  Scratch* kept_ = nullptr;  // where it goes back to
};

std::uint64_t LosslessBound(std::size_t planes, std::uint64_t raw_bytes) {
  const std::uint64_t n = raw_bytes / planes;
  return kFrameLengthBytes + ZSTD_compressBound(n) + (planes - 1) * n;
}

Result<std::uint64_t> EncodeLossless(ElementType element, std::span<const std::byte> raw,
                                     std::span<std::byte> out) {
  const std::size_t planes = PlaneCount(element, raw.size());
  const std::size_t n = raw.size() / planes;
  ScratchLease top(planes > 1 ? n : 0);  // the top plane gathered, where there are several
  std::span<const std::byte> first = raw;
  if (planes == 2) {  // 16-bit elements: a loop the compiler vectorises
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t value;
      std::memcpy(&value, raw.data() + 2 * i, 2);
      top.data()[i] = std::byte(static_cast<std::uint8_t>(value >> 8));
    }
    first = std::span(top.data(), n);
  } else if (planes > 1) {
    for (std::size_t i = 0; i < n; ++i) top.data()[i] = raw[i * planes + planes - 1];
    first = std::span(top.data(), n);
  }
  std::byte* frame = out.data() + kFrameLengthBytes;
  const std::size_t compressed =
      ZSTD_compressCCtx(Zstd().compress, frame, ZSTD_compressBound(n), first.data(), n, kZstdLevel);
  if (ZSTD_isError(compressed)) {
    return Status(ErrorCode::kInternal,
                  std::string("lossless encode: ") + ZSTD_getErrorName(compressed));
  }
  const std::uint64_t length = compressed;
  std::memcpy(out.data(), &length, sizeof(length));
  std::byte* rest = frame + compressed;
  if (planes == 2) {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t value;
      std::memcpy(&value, raw.data() + 2 * i, 2);
      rest[i] = std::byte(static_cast<std::uint8_t>(value));
    }
    return static_cast<std::uint64_t>(rest + n - out.data());
  }
  for (std::size_t plane = planes - 1; plane-- > 0; rest += n) {
    for (std::size_t i = 0; i < n; ++i) rest[i] = raw[i * planes + plane];
  }
  return static_cast<std::uint64_t>(rest - out.data());
}

Status DecodeLossless(const PayloadEncoding& encoding, std::uint64_t payload_bytes,
                      std::span<std::byte> buffer) {
  const std::size_t planes = PlaneCount(encoding.element, encoding.raw_bytes);
  const std::size_t n = buffer.size() / planes;
  std::uint64_t compressed = 0;
  std::memcpy(&compressed, buffer.data(), sizeof(compressed));
  if (compressed > payload_bytes - kFrameLengthBytes ||
      kFrameLengthBytes + compressed + (planes - 1) * n != payload_bytes) {
    return CorruptEncoding("a lossless frame of " + std::to_string(compressed) +
                           " bytes does not fit its payload of " + std::to_string(payload_bytes));
  }
  // The planes as they will be read: the top one decompressed, the others
  // copied out of the payload before the object overwrites it.
  ScratchLease scratch(buffer.size());
  std::byte* const separate = scratch.data();
  const std::size_t got = ZSTD_decompressDCtx(Zstd().decompress, separate, n,
                                              buffer.data() + kFrameLengthBytes, compressed);
  if (ZSTD_isError(got) || got != n) {
    return CorruptEncoding(ZSTD_isError(got)
                               ? std::string("lossless frame: ") + ZSTD_getErrorName(got)
                               : "a lossless frame decodes to the wrong size");
  }
  std::memcpy(separate + n, buffer.data() + kFrameLengthBytes + compressed, (planes - 1) * n);
  if (planes == 1) {
    std::memcpy(buffer.data(), separate, n);
    return Status::Ok();
  }
  if (planes == 2) {  // 16-bit elements, whole: a loop the compiler vectorises
    const auto* high = reinterpret_cast<const std::uint8_t*>(separate);
    const auto* low = high + n;
    for (std::size_t i = 0; i < n; ++i) {
      const auto element = static_cast<std::uint16_t>(high[i] << 8 | low[i]);
      std::memcpy(buffer.data() + 2 * i, &element, 2);
    }
    return Status::Ok();
  }
  const std::byte* from = separate;
  for (std::size_t i = 0; i < n; ++i) buffer[i * planes + planes - 1] = from[i];
  from += n;
  for (std::size_t plane = planes - 1; plane-- > 0; from += n) {
    for (std::size_t i = 0; i < n; ++i) buffer[i * planes + plane] = from[i];
  }
  return Status::Ok();
}

}  // namespace

const char* PayloadCodecName(PayloadCodec codec) {
  switch (codec) {
    case PayloadCodec::kRaw: return "raw";
    case PayloadCodec::kFp8E4M3: return "fp8-e4m3";
    case PayloadCodec::kFp8E5M2: return "fp8-e5m2";
    case PayloadCodec::kLossless: return "lossless";
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

Result<std::uint64_t> EncodedBytesBound(PayloadCodec codec, ElementType element,
                                        std::uint64_t raw_bytes) {
  if (codec == PayloadCodec::kRaw) return raw_bytes;
  if (codec == PayloadCodec::kLossless)
    return LosslessBound(PlaneCount(element, raw_bytes), raw_bytes);
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

Result<std::uint64_t> EncodePayload(PayloadCodec codec, ElementType element,
                                    std::span<const std::byte> raw, std::span<std::byte> out) {
  LMC_ASSIGN_OR_RETURN(const std::uint64_t want, EncodedBytesBound(codec, element, raw.size()));
  if (out.size() < want) {
    return Status(ErrorCode::kInvalidArgument, "encoded buffer of " + std::to_string(out.size()) +
                                                   " bytes, the payload may need " +
                                                   std::to_string(want));
  }
  if (codec == PayloadCodec::kRaw) {
    std::memcpy(out.data(), raw.data(), raw.size());
    return raw.size();
  }
  if (codec == PayloadCodec::kLossless) return EncodeLossless(element, raw, out);
  auto* codes = reinterpret_cast<std::uint8_t*>(out.data());
  const std::size_t elements = want;
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
      // element took 0.67 ms an object against 2.45 for the arithmetic
      // (serde_bench, docs/performance.md).
      const EncodeTable& table = EncodeTableOf(codec, element);
      for (std::size_t i = 0; i < elements; ++i) {
        std::uint16_t v;
        std::memcpy(&v, raw.data() + 2 * i, 2);
        codes[i] = table[v];
      }
    }
  }
  return want;
}

Status CheckEncoding(const PayloadEncoding& encoding, std::uint64_t payload_bytes) {
  // A code past ours is a newer server's: not ours to read, nor to delete.
  if (static_cast<std::uint8_t>(encoding.codec) >
          static_cast<std::uint8_t>(PayloadCodec::kLossless) ||
      static_cast<std::uint8_t>(encoding.element) >
          static_cast<std::uint8_t>(ElementType::kFloat32)) {
    return Status(ErrorCode::kNotSupported,
                  "L2 object encoding: codec " + std::to_string(static_cast<int>(encoding.codec)) +
                      ", element type " + std::to_string(static_cast<int>(encoding.element)) +
                      ": written by a newer server");
  }
  switch (encoding.codec) {
    case PayloadCodec::kRaw:
      if (encoding.raw_bytes != payload_bytes)
        return CorruptEncoding("raw size differs from payload");
      return Status::Ok();
    case PayloadCodec::kFp8E4M3:
    case PayloadCodec::kFp8E5M2: break;
    case PayloadCodec::kLossless: {
      const std::uint64_t bound =
          LosslessBound(PlaneCount(encoding.element, encoding.raw_bytes), encoding.raw_bytes);
      // No larger than the object: the payload is read into its buffer.
      if (payload_bytes < kFrameLengthBytes ||
          payload_bytes > std::min(bound, encoding.raw_bytes)) {
        return CorruptEncoding(std::to_string(payload_bytes) + " lossless payload bytes for " +
                               std::to_string(encoding.raw_bytes) + " raw bytes");
      }
      return Status::Ok();
    }
  }
  auto want = EncodedBytesBound(encoding.codec, encoding.element, encoding.raw_bytes);
  if (!want.ok()) return CorruptEncoding(want.status().message());
  if (*want != payload_bytes) {
    return CorruptEncoding(std::to_string(payload_bytes) + " payload bytes, " +
                           std::to_string(*want) + " expected for " +
                           std::to_string(encoding.raw_bytes) + " raw bytes");
  }
  return Status::Ok();
}

Status DecodePayload(const PayloadEncoding& encoding, std::uint64_t payload_bytes,
                     std::span<std::byte> buffer) {
  if (!encoding.encoded()) return Status::Ok();
  // Again here, so that no caller can decode what was never checked.
  LMC_RETURN_IF_ERROR(CheckEncoding(encoding, payload_bytes));
  if (buffer.size() != encoding.raw_bytes) {
    return CorruptEncoding("a buffer of " + std::to_string(buffer.size()) +
                           " bytes for an object of " + std::to_string(encoding.raw_bytes));
  }
  if (encoding.codec == PayloadCodec::kLossless) {
    return DecodeLossless(encoding, payload_bytes, buffer);
  }
  const DecodeTable& table = DecodeTableOf(encoding.codec);
  const std::size_t elements = buffer.size() / ElementBytes(encoding.element);
  switch (encoding.element) {
    case ElementType::kBFloat16: DecodeBackwards(table.bfloat16, buffer, elements); break;
    case ElementType::kFloat16: DecodeBackwards(table.float16, buffer, elements); break;
    case ElementType::kFloat32: DecodeBackwards(table.float32, buffer, elements); break;
    case ElementType::kUnknown: break;
  }
  return Status::Ok();
}

std::uint8_t Fp8FromFloat(PayloadCodec codec, float value) {
  return Encode(FormatOf(codec), value);
}

float FloatFromFp8(PayloadCodec codec, std::uint8_t code) { return Decode(FormatOf(codec), code); }

}  // namespace lmcache::tier
