// PayloadCodec: how an L2 adapter's `serde` stores an object's bytes, and
// how any adapter turns them back into what L1 held.
//
// The reference's `fp8` serde (lmcache/v1/distributed/serde/fp8.py) casts the
// object's tensor to torch.float8_e4m3fn or float8_e5m2, one byte per element
// in the tensor's order, with no scale: torch's cast, which rounds to nearest
// (ties to even) and turns what is past the format's range into NaN (e4m3fn)
// or infinity (e5m2). Loading casts back to the source dtype, which holds
// every fp8 value exactly. This file does the same, byte for byte, for
// bfloat16, float16 and float32 sources (a NaN decodes to a quiet NaN of
// its sign, whose payload bits may differ from torch's).
//
// Beyond the reference, `lossless` (ours): the object's byte planes split by
// element (byte k of every element together), the most significant plane
// (sign and exponent, which cluster) through zstd at level 1 and the others
// as they are. On KV-like bfloat16 that stores 0.69 of the bytes; zstd over
// every plane saved the same and took 1.7 times as long, zstd without the
// split stored 0.79, LZ4 0.88 at best (docs/performance.md, "Compressed
// tiers"). Payload: the compressed plane's
// length (u64), its zstd frame, then the other planes, most significant
// first. An object of unknown element type is one plane.
//
// The stored bytes are described by a PayloadEncoding, which the object's
// header records (object_format.h), so whoever reads the object decodes it
// whatever its own configuration says. An encoded payload lies at the start
// of the L1 buffer of the object's full size and is decoded there (fp8 in
// place; lossless through a buffer of the object's size).
//
// Thread-safety: pure functions (the conversion tables are built once,
// thread-safely, on first use).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "lmcache/status.h"

namespace lmcache::tier {

// The codes are stored in object headers: never renumber.
enum class PayloadCodec : std::uint8_t {
  kRaw = 0,       // the bytes as L1 held them
  kFp8E4M3 = 1,   // torch.float8_e4m3fn
  kFp8E5M2 = 2,   // torch.float8_e5m2
  kLossless = 3,  // byte planes, the top one through zstd (above)
};

// The element type of an object's tensor, where a codec needs it. Stored in
// object headers: never renumber.
enum class ElementType : std::uint8_t {
  kUnknown = 0,
  kBFloat16 = 1,
  kFloat16 = 2,
  kFloat32 = 3,
};

struct PayloadEncoding {
  PayloadCodec codec = PayloadCodec::kRaw;
  ElementType element = ElementType::kUnknown;
  std::uint64_t raw_bytes = 0;  // the object's size in L1 (kRaw: the payload's own)

  bool encoded() const { return codec != PayloadCodec::kRaw; }
  bool operator==(const PayloadEncoding&) const = default;
};

// "fp8-e4m3", "fp8-e5m2", "lossless", "raw": for stats and logs.
const char* PayloadCodecName(PayloadCodec codec);
// The torch name ("bfloat16", "float16", "float32"), or "unknown".
const char* ElementTypeName(ElementType element);
// The element type of a torch dtype name (with or without "torch.", torch's
// aliases "half", "float", "bf16" too); kUnknown for one no codec handles.
ElementType ElementTypeOfDtype(std::string_view dtype);
std::size_t ElementBytes(ElementType element);  // 0 for kUnknown

// The most `codec` can make of `raw_bytes` of `element`s (fp8: exactly
// what it makes), or an error when the codec cannot encode them (fp8: an
// unknown element type, a size that is not a whole number of elements).
Result<std::uint64_t> EncodedBytesBound(PayloadCodec codec, ElementType element,
                                        std::uint64_t raw_bytes);

// Encodes `raw` (elements of `element`) into `out`, at least
// EncodedBytesBound long; the bytes it wrote.
Result<std::uint64_t> EncodePayload(PayloadCodec codec, ElementType element,
                                    std::span<const std::byte> raw, std::span<std::byte> out);

// Checks that `encoding`, read from an untrusted header, describes a payload
// of `payload_bytes` this server can decode, no larger than the object
// (kCorrupt naming what is wrong). A codec or element type past this
// server's is kNotSupported: a newer server wrote it, and a reader leaves
// it alone (a miss), never deletes it.
Status CheckEncoding(const PayloadEncoding& encoding, std::uint64_t payload_bytes);

// `buffer` (encoding.raw_bytes long) holds the encoded payload, of
// `payload_bytes`, at its start; afterwards it holds the decoded object.
// kCorrupt when CheckEncoding refuses the encoding, or the payload does not
// decode to the object's size (a lossless frame can say otherwise): then
// `buffer` holds nothing to serve. kNotSupported for a codec or element
// type of a newer server (CheckEncoding).
Status DecodePayload(const PayloadEncoding& encoding, std::uint64_t payload_bytes,
                     std::span<std::byte> buffer);

// One element's conversion, exposed for the tests: the fp8 code of `value`,
// and the value of a code.
std::uint8_t Fp8FromFloat(PayloadCodec codec, float value);
float FloatFromFp8(PayloadCodec codec, std::uint8_t code);

}  // namespace lmcache::tier
