// PayloadCodec: the reference's fp8 serde, checked against values this test
// computes on its own. The oracle below knows nothing of the codec's bit
// manipulation: it lists every finite value of a format from the format's
// definition (sign, exponent, mantissa, bias), and casts a value by picking
// the nearest (ties to the even code), as torch's cast does; past the
// format's range, torch gives NaN (e4m3fn, which has no infinity) or
// infinity (e5m2). Every bfloat16 and float16 value and a million float32s
// are cast both ways and must agree; decoding gives back exactly the
// oracle's value; encoded tensors decode in place within the format's error.
#include "tier/payload_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

namespace lmcache::tier {
namespace {

struct Format {
  PayloadCodec codec;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool finite_only;       // e4m3fn: exponent and mantissa all ones is NaN, no infinity
  std::uint8_t overflow;  // what torch gives past the range
  double overflow_at;     // the first value past the largest finite one (its would-be successor)
};

const Format kE4M3{PayloadCodec::kFp8E4M3, 4, 3, 7, true, 0x7F, 480.0};
const Format kE5M2{PayloadCodec::kFp8E5M2, 5, 2, 15, false, 0x7C, 65536.0};

// The value of a code from the format's definition; NaN for the NaN codes,
// infinity for e5m2's.
double ValueOf(const Format& f, std::uint8_t code) {
  const int e = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int m = code & ((1 << f.mantissa_bits) - 1);
  const int e_max = (1 << f.exponent_bits) - 1;
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (f.finite_only && e == e_max && m == (1 << f.mantissa_bits) - 1) return std::nan("");
  if (!f.finite_only && e == e_max) {
    return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
  }
  const double fraction = static_cast<double>(m) / std::pow(2.0, f.mantissa_bits);
  if (e == 0) return sign * fraction * std::pow(2.0, 1 - f.bias);
  return sign * (1.0 + fraction) * std::pow(2.0, e - f.bias);
}

// torch's cast, by brute force over the format's codes.
std::uint8_t Cast(const Format& f, double v) {
  const std::uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (std::isnan(v)) return sign | 0x7F;
  const double a = std::fabs(v);
  if (a >= f.overflow_at) return sign | f.overflow;
  int best = -1;
  double best_distance = 0;
  for (int code = 0; code < 0x80; ++code) {
    const double value = ValueOf(f, static_cast<std::uint8_t>(code));
    if (std::isnan(value) || std::isinf(value)) continue;
    const double d = std::fabs(value - a);
    if (best < 0 || d < best_distance || (d == best_distance && code % 2 == 0)) {
      best = code;
      best_distance = d;
    }
  }
  // The would-be successor of the largest finite value rounds to overflow.
  const double to_overflow = f.overflow_at - a;
  if (to_overflow < best_distance || (to_overflow == best_distance && f.overflow % 2 == 0)) {
    return sign | f.overflow;
  }
  return sign | static_cast<std::uint8_t>(best);
}

double FromBFloat16(std::uint16_t bits) {
  float f;
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  std::memcpy(&f, &wide, 4);
  return f;
}

double FromHalf(std::uint16_t bits) {
  const int e = (bits >> 10) & 0x1F;
  const int m = bits & 0x3FF;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1F) {
    return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::copysign(NAN, sign);
  }
  if (e == 0) return sign * m * std::pow(2.0, -24);
  return sign * (1.0 + m / 1024.0) * std::pow(2.0, e - 15);
}

std::uint8_t EncodeOne(PayloadCodec codec, ElementType element, const void* value) {
  std::byte code{};
  const auto raw = std::span(static_cast<const std::byte*>(value), ElementBytes(element));
  EXPECT_TRUE(EncodePayload(codec, element, raw, std::span(&code, 1)).ok());
  return static_cast<std::uint8_t>(code);
}

class Fp8Test : public ::testing::TestWithParam<Format> {};

TEST_P(Fp8Test, EveryBFloat16AndFloat16CastsAsTorchDoes) {
  const Format& f = GetParam();
  int mismatches = 0;
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const std::uint8_t want_bf16 = Cast(f, FromBFloat16(b));
    const std::uint8_t want_f16 = Cast(f, FromHalf(b));
    const std::uint8_t got_bf16 = EncodeOne(f.codec, ElementType::kBFloat16, &b);
    const std::uint8_t got_f16 = EncodeOne(f.codec, ElementType::kFloat16, &b);
    if ((got_bf16 != want_bf16 || got_f16 != want_f16) && ++mismatches <= 5) {
      ADD_FAILURE() << std::hex << "bits 0x" << bits << ": bf16 0x" << int(got_bf16) << " want 0x"
                    << int(want_bf16) << ", f16 0x" << int(got_f16) << " want 0x" << int(want_f16);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(Fp8Test, Float32sCastAsTorchDoesAcrossTheRangeAndAtItsEdges) {
  const Format& f = GetParam();
  std::mt19937 rng(7);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               448.0f,
                               464.0f,
                               465.0f,
                               479.9f,
                               480.0f,
                               57344.0f,
                               61440.0f,
                               61441.0f,
                               65536.0f,
                               1e30f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min(),
                               std::ldexp(1.0f, -10),
                               std::ldexp(1.0f, -17),
                               std::ldexp(3.0f, -18)};
  // Every midpoint between neighbouring codes (the ties) and a hair either side.
  for (int code = 0; code < 0x7E; ++code) {
    const double lo = ValueOf(f, static_cast<std::uint8_t>(code));
    const double hi = ValueOf(f, static_cast<std::uint8_t>(code + 1));
    if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
    const auto mid = static_cast<float>((lo + hi) / 2);
    values.insert(values.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)});
  }
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::normal_distribution<float> activations(0.0f, 2.0f);
  for (int i = 0; i < 100000; ++i) {
    const std::uint32_t bits = any_bits(rng);
    float v;
    std::memcpy(&v, &bits, 4);
    values.push_back(v);
    values.push_back(activations(rng));
  }
  int mismatches = 0;
  for (const float v : values) {
    const std::uint8_t want = Cast(f, v);
    const std::uint8_t got = EncodeOne(f.codec, ElementType::kFloat32, &v);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << std::hex << "value " << v << ": 0x" << int(got) << " want 0x" << int(want);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(Fp8Test, EveryCodeDecodesToItsValueInEachDtype) {
  const Format& f = GetParam();
  for (int code = 0; code < 256; ++code) {
    const double want = ValueOf(f, static_cast<std::uint8_t>(code));
    for (const ElementType element :
         {ElementType::kBFloat16, ElementType::kFloat16, ElementType::kFloat32}) {
      const std::size_t item = ElementBytes(element);
      std::vector<std::byte> buffer(item);
      buffer[0] = std::byte(static_cast<unsigned char>(code));
      ASSERT_TRUE(DecodePayload({f.codec, element, item}, 1, buffer).ok());
      std::uint32_t bits = 0;
      std::memcpy(&bits, buffer.data(), item);
      double got;
      if (element == ElementType::kBFloat16)
        got = FromBFloat16(static_cast<std::uint16_t>(bits));
      else if (element == ElementType::kFloat16)
        got = FromHalf(static_cast<std::uint16_t>(bits));
      else {
        float v;
        std::memcpy(&v, &bits, 4);
        got = v;
      }
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "code " << code << " " << ElementTypeName(element);
      } else {
        EXPECT_EQ(got, want) << "code " << code << " " << ElementTypeName(element);
      }
    }
  }
}

// The bound of one cast: half the gap to the next code (relative for
// normals, absolute below them).
double Bound(const Format& f, double x) {
  const double min_normal = std::pow(2.0, 1 - f.bias);
  if (std::fabs(x) < min_normal) return std::pow(2.0, 1 - f.bias - f.mantissa_bits) / 2;
  return std::fabs(x) * std::pow(2.0, -f.mantissa_bits - 1) * (1 + 1e-12);
}

// Tensors of every dtype and odd sizes, with keys' and values' spread (a
// normal of sigma 1 with a few outliers to +-40, as attention keys have),
// round trip through the tier within the format's error.
TEST_P(Fp8Test, TensorsOfOddSizesDecodeInPlaceWithinTheFormatsError) {
  const Format& f = GetParam();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> outlier(-40.0f, 40.0f);
  for (const ElementType element :
       {ElementType::kBFloat16, ElementType::kFloat16, ElementType::kFloat32}) {
    for (const std::size_t n :
         {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{1001}, std::size_t{65537}}) {
      const std::size_t item = ElementBytes(element);
      std::vector<double> values(n);
      std::vector<std::byte> raw(n * item);
      for (std::size_t i = 0; i < n; ++i) {
        float v = i % 97 == 0 ? outlier(rng) : normal(rng);
        std::uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (element == ElementType::kBFloat16) {
          const auto b = static_cast<std::uint16_t>(bits >> 16);  // truncation: any bf16 will do
          std::memcpy(raw.data() + i * 2, &b, 2);
          values[i] = FromBFloat16(b);
        } else if (element == ElementType::kFloat16) {
          // A float16 near v, built from the definition (v is well inside its range).
          const int e = std::max(-14, std::ilogb(v == 0 ? 1.0f : v));
          const auto m = static_cast<int>(std::fabs(v) / std::pow(2.0, e - 10));
          const std::uint16_t h = static_cast<std::uint16_t>(
              (v < 0 ? 0x8000 : 0) |
              (m >= 1024 ? ((e + 15) << 10) | (m - 1024) : m));  // m < 1024: a subnormal
          std::memcpy(raw.data() + i * 2, &h, 2);
          values[i] = FromHalf(h);
        } else {
          std::memcpy(raw.data() + i * 4, &v, 4);
          values[i] = v;
        }
      }
      const auto encoded = EncodedBytesBound(f.codec, element, raw.size());
      ASSERT_TRUE(encoded.ok());
      ASSERT_EQ(*encoded, n);  // one byte an element: half of 16-bit, a quarter of 32-bit
      std::vector<std::byte> buffer(raw.size(), std::byte{0xEE});
      ASSERT_EQ(*EncodePayload(f.codec, element, raw, std::span(buffer).first(n)), n);
      ASSERT_TRUE(DecodePayload({f.codec, element, raw.size()}, n, buffer).ok());
      for (std::size_t i = 0; i < n; ++i) {
        double got;
        if (element == ElementType::kFloat32) {
          float v;
          std::memcpy(&v, buffer.data() + i * 4, 4);
          got = v;
        } else {
          std::uint16_t b;
          std::memcpy(&b, buffer.data() + i * 2, 2);
          got = element == ElementType::kBFloat16 ? FromBFloat16(b) : FromHalf(b);
        }
        ASSERT_LE(std::fabs(got - values[i]), Bound(f, values[i]))
            << ElementTypeName(element) << " n " << n << " at " << i << ": " << values[i]
            << " came back " << got;
      }
    }
  }
}

std::string FormatName(const ::testing::TestParamInfo<Format>& format) {
  return format.param.codec == PayloadCodec::kFp8E4M3 ? "E4M3" : "E5M2";
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test, ::testing::Values(kE4M3, kE5M2), FormatName);

TEST(PayloadCodecTest, SizesAreOneByteAnElementAndOtherSizesAreRefused) {
  EXPECT_EQ(*EncodedBytesBound(PayloadCodec::kFp8E4M3, ElementType::kBFloat16, 4096), 2048u);
  EXPECT_EQ(*EncodedBytesBound(PayloadCodec::kFp8E5M2, ElementType::kFloat32, 4096), 1024u);
  EXPECT_EQ(*EncodedBytesBound(PayloadCodec::kRaw, ElementType::kUnknown, 4097), 4097u);
  EXPECT_FALSE(EncodedBytesBound(PayloadCodec::kFp8E4M3, ElementType::kUnknown, 4096).ok());
  EXPECT_FALSE(EncodedBytesBound(PayloadCodec::kFp8E4M3, ElementType::kFloat16, 4095).ok());
  std::vector<std::byte> raw(8), out(3);
  EXPECT_FALSE(EncodePayload(PayloadCodec::kFp8E4M3, ElementType::kFloat16, raw, out).ok());
}

TEST(PayloadCodecTest, AnEncodingReadFromAHeaderIsCheckedAgainstItsPayload) {
  EXPECT_TRUE(CheckEncoding({PayloadCodec::kFp8E4M3, ElementType::kBFloat16, 200}, 100).ok());
  EXPECT_TRUE(CheckEncoding({PayloadCodec::kRaw, ElementType::kUnknown, 100}, 100).ok());
  const PayloadEncoding bad[] = {
      {PayloadCodec::kFp8E4M3, ElementType::kBFloat16, 200},  // against 99 bytes
      {PayloadCodec::kFp8E4M3, ElementType::kUnknown, 99},
      {PayloadCodec::kFp8E5M2, ElementType::kFloat32, 99 * 4 + 1},
      {PayloadCodec::kRaw, ElementType::kUnknown, 100},
  };
  for (const PayloadEncoding& e : bad) {
    const Status s = CheckEncoding(e, 99);
    EXPECT_EQ(s.code(), ErrorCode::kCorrupt) << PayloadCodecName(e.codec) << " " << e.raw_bytes;
  }
  // A newer server's codes: not ours to read (nor to delete, so not corrupt).
  const PayloadEncoding newer[] = {
      {static_cast<PayloadCodec>(9), ElementType::kBFloat16, 198},
      {PayloadCodec::kFp8E5M2, static_cast<ElementType>(7), 198},
      {PayloadCodec::kLossless, static_cast<ElementType>(9), 198},
  };
  for (const PayloadEncoding& e : newer) {
    EXPECT_EQ(CheckEncoding(e, 99).code(), ErrorCode::kNotSupported) << static_cast<int>(e.codec);
    std::vector<std::byte> buffer(198);
    EXPECT_EQ(DecodePayload(e, 99, buffer).code(), ErrorCode::kNotSupported);
  }
}

TEST(PayloadCodecTest, TorchDtypeNamesAndAliasesAreKnown) {
  EXPECT_EQ(ElementTypeOfDtype("bfloat16"), ElementType::kBFloat16);
  EXPECT_EQ(ElementTypeOfDtype("torch.float16"), ElementType::kFloat16);
  EXPECT_EQ(ElementTypeOfDtype("half"), ElementType::kFloat16);
  EXPECT_EQ(ElementTypeOfDtype("float"), ElementType::kFloat32);
  EXPECT_EQ(ElementTypeOfDtype("float8_e4m3fn"), ElementType::kUnknown);
  EXPECT_EQ(ElementTypeOfDtype("uint8"), ElementType::kUnknown);
}

// The lossless codec: every dtype and odd sizes, compressible and not, come
// back byte for byte; KV-like bfloat16 is stored in less than its size.
std::vector<std::byte> KvLikeBFloat16(std::size_t elements, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::byte> out(elements * 2);
  for (std::size_t i = 0; i < elements; ++i) {
    float v = normal(rng) * (1.0f + static_cast<float>(i % 64));  // channels of their own scale
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    const auto b = static_cast<std::uint16_t>(bits >> 16);
    std::memcpy(out.data() + 2 * i, &b, 2);
  }
  return out;
}

// The object back from its lossless encoding; nullopt where the encoding is
// larger than the object (random bytes), which a serde stores raw and a
// header may not claim.
Result<std::optional<std::vector<std::byte>>> LosslessRoundTrip(ElementType element,
                                                                std::span<const std::byte> raw,
                                                                std::uint64_t* stored = nullptr) {
  auto bound = EncodedBytesBound(PayloadCodec::kLossless, element, raw.size());
  if (!bound.ok()) return bound.status();
  std::vector<std::byte> encoded(*bound);
  auto n = EncodePayload(PayloadCodec::kLossless, element, raw, encoded);
  if (!n.ok()) return n.status();
  if (stored != nullptr) *stored = *n;
  const PayloadEncoding encoding{PayloadCodec::kLossless, element, raw.size()};
  if (*n > raw.size()) {
    if (CheckEncoding(encoding, *n).ok())
      return Status(ErrorCode::kInternal, "a larger payload passed");
    return std::optional<std::vector<std::byte>>();
  }
  LMC_RETURN_IF_ERROR(CheckEncoding(encoding, *n));
  std::vector<std::byte> buffer(raw.size(), std::byte{0xEE});
  std::copy_n(encoded.begin(), *n, buffer.begin());
  LMC_RETURN_IF_ERROR(DecodePayload(encoding, *n, buffer));
  return std::optional(std::move(buffer));
}

TEST(LosslessCodecTest, EveryDtypeAndOddSizesComeBackByteForByte) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  for (const ElementType element : {ElementType::kUnknown, ElementType::kBFloat16,
                                    ElementType::kFloat16, ElementType::kFloat32}) {
    for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{4},
                                    std::size_t{12}, std::size_t{1001}, std::size_t{65540}}) {
      std::vector<std::byte> random(bytes), kv = KvLikeBFloat16(bytes / 2, 3);
      kv.resize(bytes);
      for (auto& b : random) b = std::byte(static_cast<unsigned char>(byte(rng)));
      for (const auto* raw : {&random, &kv}) {
        auto back = LosslessRoundTrip(element, *raw);
        ASSERT_TRUE(back.ok()) << ElementTypeName(element) << " " << bytes << ": "
                               << back.status().ToString();
        if (raw == &kv && bytes > 1000) {
          ASSERT_TRUE(back->has_value()) << "KV values stored in less than their size";
        }
        if (back->has_value()) EXPECT_EQ(**back, *raw) << ElementTypeName(element) << " " << bytes;
      }
    }
  }
}

TEST(LosslessCodecTest, KvLikeBFloat16IsStoredInLessThanItsSize) {
  const auto raw = KvLikeBFloat16(1 << 20, 9);
  std::uint64_t stored = 0;
  auto back = LosslessRoundTrip(ElementType::kBFloat16, raw, &stored);
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ(**back, raw);
  EXPECT_LT(stored, raw.size() * 8 / 10) << "the exponent plane compresses";
}

TEST(LosslessCodecTest, AFrameThatDoesNotFitItsPayloadOrItsObjectIsCorrupt) {
  const auto raw = KvLikeBFloat16(4096, 2);
  std::vector<std::byte> encoded(
      *EncodedBytesBound(PayloadCodec::kLossless, ElementType::kBFloat16, raw.size()));
  const std::uint64_t n =
      *EncodePayload(PayloadCodec::kLossless, ElementType::kBFloat16, raw, encoded);
  const PayloadEncoding encoding{PayloadCodec::kLossless, ElementType::kBFloat16, raw.size()};
  const auto decode = [&](std::vector<std::byte> payload, std::uint64_t payload_bytes,
                          const PayloadEncoding& as) {
    std::vector<std::byte> buffer(as.raw_bytes);
    std::copy_n(payload.begin(), std::min<std::size_t>(payload_bytes, buffer.size()),
                buffer.begin());
    return DecodePayload(as, payload_bytes, buffer);
  };
  ASSERT_TRUE(decode(encoded, n, encoding).ok());
  std::vector<std::byte> longer = encoded;  // the frame's length says one byte more
  std::uint64_t length;
  std::memcpy(&length, longer.data(), 8);
  length += 1;
  std::memcpy(longer.data(), &length, 8);
  EXPECT_EQ(decode(longer, n, encoding).code(), ErrorCode::kCorrupt);
  length = ~std::uint64_t{0};  // absurd
  std::memcpy(longer.data(), &length, 8);
  EXPECT_EQ(decode(longer, n, encoding).code(), ErrorCode::kCorrupt);
  std::vector<std::byte> broken = encoded;  // the zstd magic gone
  broken[8] ^= std::byte{0xFF};
  EXPECT_EQ(decode(broken, n, encoding).code(), ErrorCode::kCorrupt);
  // A header that claims a smaller object than the frame holds.
  const PayloadEncoding smaller{PayloadCodec::kLossless, ElementType::kBFloat16, raw.size() - 2};
  EXPECT_EQ(decode(encoded, n - 1, smaller).code(), ErrorCode::kCorrupt);
  // CheckEncoding's bounds.
  EXPECT_EQ(CheckEncoding(encoding, 7).code(), ErrorCode::kCorrupt);
  EXPECT_EQ(CheckEncoding(encoding, raw.size() * 2).code(), ErrorCode::kCorrupt);
  // A header that claims a larger object than the frame holds.
  const PayloadEncoding larger{PayloadCodec::kLossless, ElementType::kBFloat16, raw.size() + 2};
  EXPECT_EQ(decode(encoded, n, larger).code(), ErrorCode::kCorrupt);
}

}  // namespace
}  // namespace lmcache::tier
