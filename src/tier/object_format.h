// ObjectFormat: how one L1 object is laid out in a slower tier (a file of the
// fs adapter, a value of the resp adapter): a self-describing header, then
// the payload bytes.
//
// The header carries a magic, the format version, the payload length, the
// object's full key (so a file or value under the wrong name is detected),
// an XXH3-64 checksum of the payload and one of the header itself. Anything
// read back is untrusted: ParseHeader checks every length against what it
// was given before it reads, and a payload is served only after its checksum
// matches. A header is padded to `alignment` bytes so the payload can be
// read with O_DIRECT into an aligned L1 buffer.
//
// Layout (little-endian):
//   0  magic "LMCKVL2\0"          8
//   8  version (2; 3 when tagged; 4 when encoded; 1 is read too) u32
//  12  header_bytes (padded)      u32
//  16  payload_bytes              u64
//  24  payload_checksum (XXH3-64) u64
//  32  header_checksum            u64   XXH3-64 of the header with this field 0
//  40  kv_rank                    i64
//  48  object_group_id            i32
//  52  model_name length          u16
//  54  cache_salt length          u16
//  56  chunk_hash                 32 bytes
//  88  layout_namespace           u32   (version 1 has none: 0)
//  92  tags length                u16   (version 3; 0 before)
//  94  reserved (0)               u16
//  96  model_name, cache_salt, tags   bytes, then zero padding to header_bytes
//      (version 1: from byte 88; version 4: from byte 112)
// Version 4 (an encoded payload, payload_codec.h) adds before the strings:
//  96  raw_bytes (the object's size in L1)  u64
// 104  codec                      u8
// 105  element type               u8
// 106  reserved (0)               6 bytes
// A tagged object is written as version 3, so a server from before tags
// refuses it instead of serving it to untagged requests; untagged objects
// stay version 2, which such a server still reads. An encoded object is
// version 4 (tagged or not), which no server from before encodings reads.
// An encoded object's header is padded to kEncodedHeaderAlign whatever the
// adapter's alignment, so its size follows from its key alone.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "lmcache/status.h"
#include "store/object_key.h"
#include "tier/payload_codec.h"

namespace lmcache::tier {

inline constexpr std::uint32_t kObjectFormatVersion = 2;
inline constexpr std::uint32_t kObjectFormatVersionTagged = 3;
inline constexpr std::uint32_t kObjectFormatVersionEncoded = 4;
inline constexpr std::size_t kHeaderFixedBytes = 96;
inline constexpr std::size_t kHeaderFixedBytesV4 = 112;
inline constexpr std::size_t kEncodedHeaderAlign = 4096;
inline constexpr std::size_t kHeaderFixedBytesV1 = 88;
// A header never exceeds this (model name and salt are bounded by ObjectKey's rules).
inline constexpr std::size_t kMaxHeaderBytes = 8192;

struct ObjectHeader {
  std::uint32_t header_bytes = 0;
  std::uint64_t payload_bytes = 0;
  std::uint64_t payload_checksum = 0;
  store::ObjectKey key;
  // How the payload stores the object (raw: as L1 held it, raw_bytes ==
  // payload_bytes). Checked by ParseObjectHeader.
  PayloadEncoding encoding;
  // The object's size in L1: what a load's buffer must be.
  std::uint64_t object_bytes() const { return encoding.raw_bytes; }
};

// The header of `key` with `payload`, padded to a multiple of `alignment`
// (1 = no padding; a power of two). With an `encoding` that is encoded, the
// payload is that encoding of the object (version 4, padded to
// kEncodedHeaderAlign).
std::string EncodeObjectHeader(const store::ObjectKey& key, std::span<const std::byte> payload,
                               std::size_t alignment, const PayloadEncoding& encoding = {});
// The size of the header EncodeObjectHeader writes for an encoded object of `key`.
std::size_t EncodedObjectHeaderBytes(const store::ObjectKey& key);
// Whether storing `key`'s object of `raw_bytes` as `encoded_bytes` is worth
// it: the encoded object, header included, is no larger than the raw
// payload alone. Only such objects are stored encoded, so a reader can tell
// an encoded object from a raw one by its size (the fs adapter does).
bool EncodingSaves(const store::ObjectKey& key, std::uint64_t raw_bytes,
                   std::uint64_t encoded_bytes);

// Whether `bytes` begin with this format's magic: the file or value was
// written by a server of ours (whole or not), never someone else's.
bool HasObjectMagic(std::span<const std::byte> bytes);
// Whether `bytes`, the first of a value still arriving, could begin an
// object of ours: not empty, and as much of the magic as they hold.
bool MayBeginObject(std::span<const std::byte> bytes);
// The header length a header at the start of `bytes` declares (unchecked:
// for a reader that guessed the length to tell another object's header
// from a damaged one), or 0 without the magic or the field.
std::uint32_t DeclaredHeaderBytes(std::span<const std::byte> bytes);

// The header at the start of `bytes`, which may hold more (the payload) or
// less (then kCorrupt: truncated). kCorrupt names what is wrong;
// kNotSupported: an encoding of a newer server (payload_codec.h), which the
// adapters treat as a miss and leave where it is.
Result<ObjectHeader> ParseObjectHeader(std::span<const std::byte> bytes);

// OK when `payload` is what `header` describes (length and checksum) and the
// header names `expected`; kCorrupt otherwise.
Status VerifyObject(const ObjectHeader& header, const store::ObjectKey& expected,
                    std::span<const std::byte> payload);

std::uint64_t PayloadChecksum(std::span<const std::byte> payload);

// A load's last step: `out` is the object's L1 buffer (header.object_bytes()
// long) with the payload read into its start. Verifies the payload
// (VerifyObject) and decodes it there when it is encoded (kCorrupt when it
// does not decode).
Status VerifyAndDecode(const ObjectHeader& header, const store::ObjectKey& expected,
                       std::span<std::byte> out);

// PayloadChecksum of bytes that arrive piece by piece (a network read): the
// same value as PayloadChecksum of the pieces joined.
class PayloadChecksummer {
 public:
  PayloadChecksummer();
  ~PayloadChecksummer();
  PayloadChecksummer(const PayloadChecksummer&) = delete;
  PayloadChecksummer& operator=(const PayloadChecksummer&) = delete;
  void Add(std::span<const std::byte> piece);
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
  std::uint64_t bytes_ = 0;
};

// VerifyObject for a payload whose checksum was taken as it arrived.
Status VerifyObjectSummed(const ObjectHeader& header, const store::ObjectKey& expected,
                          std::uint64_t payload_bytes, std::uint64_t payload_checksum);

}  // namespace lmcache::tier
