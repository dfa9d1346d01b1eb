#include "tier/object_format.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/check.h"

namespace lmcache::tier {
namespace {

constexpr char kMagic[8] = {'L', 'M', 'C', 'K', 'V', 'L', '2', '\0'};
constexpr std::size_t kHeaderChecksumOffset = 32;

template <typename T>
void Put(std::string& out, std::size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof(T));  // little-endian hosts only (x86-64, arm64)
}

template <typename T>
T Get(std::span<const std::byte> in, std::size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

Status Corrupt(const std::string& what) {
  return Status(ErrorCode::kCorrupt, "L2 object: " + what);
}

std::uint64_t HeaderChecksum(std::span<const std::byte> header) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const std::uint64_t zero = 0;
  XXH3_64bits_update(state, header.data(), kHeaderChecksumOffset);
  XXH3_64bits_update(state, &zero, sizeof(zero));
  XXH3_64bits_update(state, header.data() + kHeaderChecksumOffset + 8,
                     header.size() - kHeaderChecksumOffset - 8);
  const std::uint64_t sum = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return sum;
}

}  // namespace

static_assert(std::endian::native == std::endian::little, "the L2 object format is little-endian");

std::uint64_t PayloadChecksum(std::span<const std::byte> payload) {
  return XXH3_64bits(payload.data(), payload.size());
}

namespace {

std::size_t PaddedHeaderBytes(const store::ObjectKey& key, std::size_t fixed,
                              std::size_t alignment) {
  const std::size_t used = fixed + key.model_name.size() + key.cache_salt.size() + key.tags.size();
  return (used + alignment - 1) / alignment * alignment;
}

}  // namespace

std::size_t EncodedObjectHeaderBytes(const store::ObjectKey& key) {
  return PaddedHeaderBytes(key, kHeaderFixedBytesV4, kEncodedHeaderAlign);
}

bool EncodingSaves(const store::ObjectKey& key, std::uint64_t raw_bytes,
                   std::uint64_t encoded_bytes) {
  return EncodedObjectHeaderBytes(key) + encoded_bytes <= raw_bytes;
}

std::string EncodeObjectHeader(const store::ObjectKey& key, std::span<const std::byte> payload,
                               std::size_t alignment, const PayloadEncoding& encoding) {
  const bool encoded = encoding.encoded();
  const std::size_t fixed = encoded ? kHeaderFixedBytesV4 : kHeaderFixedBytes;
  const std::size_t padded =
      encoded ? EncodedObjectHeaderBytes(key) : PaddedHeaderBytes(key, fixed, alignment);
  std::string out(padded, '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  Put<std::uint32_t>(out, 8,
                     encoded            ? kObjectFormatVersionEncoded
                     : key.tags.empty() ? kObjectFormatVersion
                                        : kObjectFormatVersionTagged);
  Put<std::uint32_t>(out, 12, static_cast<std::uint32_t>(padded));
  Put<std::uint64_t>(out, 16, payload.size());
  Put<std::uint64_t>(out, 24, PayloadChecksum(payload));
  Put<std::int64_t>(out, 40, key.kv_rank);
  Put<std::int32_t>(out, 48, key.object_group_id);
  Put<std::uint16_t>(out, 52, static_cast<std::uint16_t>(key.model_name.size()));
  Put<std::uint16_t>(out, 54, static_cast<std::uint16_t>(key.cache_salt.size()));
  std::memcpy(out.data() + 56, key.chunk_hash.data(), key.chunk_hash.size());
  Put<std::uint32_t>(out, 88, key.layout_namespace);
  Put<std::uint16_t>(out, 92, static_cast<std::uint16_t>(key.tags.size()));
  if (encoded) {
    Put<std::uint64_t>(out, 96, encoding.raw_bytes);
    Put<std::uint8_t>(out, 104, static_cast<std::uint8_t>(encoding.codec));
    Put<std::uint8_t>(out, 105, static_cast<std::uint8_t>(encoding.element));
  }
  char* text = out.data() + fixed;
  std::memcpy(text, key.model_name.data(), key.model_name.size());
  text += key.model_name.size();
  std::memcpy(text, key.cache_salt.data(), key.cache_salt.size());
  std::memcpy(text + key.cache_salt.size(), key.tags.data(), key.tags.size());
  Put<std::uint64_t>(out, kHeaderChecksumOffset,
                     HeaderChecksum(std::as_bytes(std::span(out.data(), out.size()))));
  return out;
}

bool MayBeginObject(std::span<const std::byte> bytes) {
  const std::size_t n = std::min(bytes.size(), sizeof(kMagic));
  return n > 0 && std::memcmp(bytes.data(), kMagic, n) == 0;
}

bool HasObjectMagic(std::span<const std::byte> bytes) {
  return bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0;
}

std::uint32_t DeclaredHeaderBytes(std::span<const std::byte> bytes) {
  if (!HasObjectMagic(bytes) || bytes.size() < 16) return 0;
  return Get<std::uint32_t>(bytes, 12);
}

Result<ObjectHeader> ParseObjectHeader(std::span<const std::byte> bytes) {
  if (bytes.size() < kHeaderFixedBytesV1) return Corrupt("shorter than a header (truncated)");
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return Corrupt("bad magic");
  const auto version = Get<std::uint32_t>(bytes, 8);
  if (version < 1 || version > kObjectFormatVersionEncoded) {
    return Corrupt("format version " + std::to_string(version) + ", this server reads 1 to " +
                   std::to_string(kObjectFormatVersionEncoded));
  }
  const std::size_t fixed = version == 1                             ? kHeaderFixedBytesV1
                            : version == kObjectFormatVersionEncoded ? kHeaderFixedBytesV4
                                                                     : kHeaderFixedBytes;
  if (bytes.size() < fixed) return Corrupt("shorter than a header (truncated)");
  ObjectHeader header;
  header.header_bytes = Get<std::uint32_t>(bytes, 12);
  const auto model_bytes = Get<std::uint16_t>(bytes, 52);
  const auto salt_bytes = Get<std::uint16_t>(bytes, 54);
  const std::uint16_t tag_bytes = version >= 3 ? Get<std::uint16_t>(bytes, 92) : 0;
  const std::size_t used = fixed + model_bytes + salt_bytes + tag_bytes;
  if (header.header_bytes < used || header.header_bytes > kMaxHeaderBytes) {
    return Corrupt("header length " + std::to_string(header.header_bytes) + " out of range");
  }
  if (bytes.size() < header.header_bytes) return Corrupt("header truncated");
  const auto header_span = bytes.first(header.header_bytes);
  if (HeaderChecksum(header_span) != Get<std::uint64_t>(bytes, kHeaderChecksumOffset)) {
    return Corrupt("header checksum mismatch");
  }
  header.payload_bytes = Get<std::uint64_t>(bytes, 16);
  header.payload_checksum = Get<std::uint64_t>(bytes, 24);
  header.key.kv_rank = Get<std::int64_t>(bytes, 40);
  header.key.object_group_id = Get<std::int32_t>(bytes, 48);
  std::memcpy(header.key.chunk_hash.data(), bytes.data() + 56, header.key.chunk_hash.size());
  if (version != 1) header.key.layout_namespace = Get<std::uint32_t>(bytes, 88);
  const char* text = reinterpret_cast<const char*>(bytes.data()) + fixed;
  header.key.model_name.assign(text, model_bytes);
  header.key.cache_salt.assign(text + model_bytes, salt_bytes);
  header.key.tags.assign(text + model_bytes + salt_bytes, tag_bytes);
  if (version == kObjectFormatVersionTagged && tag_bytes == 0) {
    return Corrupt("a version 3 header names no tags");
  }
  header.encoding.raw_bytes = header.payload_bytes;
  if (version == kObjectFormatVersionEncoded) {
    header.encoding.raw_bytes = Get<std::uint64_t>(bytes, 96);
    header.encoding.codec = static_cast<PayloadCodec>(Get<std::uint8_t>(bytes, 104));
    header.encoding.element = static_cast<ElementType>(Get<std::uint8_t>(bytes, 105));
    if (!header.encoding.encoded()) return Corrupt("a version 4 header names no encoding");
    if (Status ok = CheckEncoding(header.encoding, header.payload_bytes); !ok.ok()) return ok;
  }
  if (Status valid = store::ValidateObjectKey(header.key); !valid.ok()) {
    return Corrupt("the key it names is invalid: " + valid.message());
  }
  return header;
}

PayloadChecksummer::PayloadChecksummer() : state_(XXH3_createState()) {
  LMC_CHECK(state_ != nullptr);
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

PayloadChecksummer::~PayloadChecksummer() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void PayloadChecksummer::Add(std::span<const std::byte> piece) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), piece.data(), piece.size());
  bytes_ += piece.size();
}

std::uint64_t PayloadChecksummer::Digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

Status VerifyObjectSummed(const ObjectHeader& header, const store::ObjectKey& expected,
                          std::uint64_t payload_bytes, std::uint64_t payload_checksum) {
  if (!(header.key == expected)) {
    return Corrupt("holds " + header.key.DebugString() + ", not " + expected.DebugString());
  }
  if (payload_bytes != header.payload_bytes) {
    return Corrupt("payload of " + std::to_string(payload_bytes) + " bytes, header says " +
                   std::to_string(header.payload_bytes));
  }
  if (payload_checksum != header.payload_checksum) return Corrupt("payload checksum mismatch");
  return Status::Ok();
}

Status VerifyObject(const ObjectHeader& header, const store::ObjectKey& expected,
                    std::span<const std::byte> payload) {
  // The checksum is taken only once key and length agree.
  if (!(header.key == expected) || payload.size() != header.payload_bytes) {
    return VerifyObjectSummed(header, expected, payload.size(), header.payload_checksum);
  }
  return VerifyObjectSummed(header, expected, payload.size(), PayloadChecksum(payload));
}

Status VerifyAndDecode(const ObjectHeader& header, const store::ObjectKey& expected,
                       std::span<std::byte> out) {
  if (out.size() != header.object_bytes()) {
    return Corrupt("a buffer of " + std::to_string(out.size()) + " bytes for an object of " +
                   std::to_string(header.object_bytes()));
  }
  LMC_RETURN_IF_ERROR(VerifyObject(header, expected, out.first(header.payload_bytes)));
  return DecodePayload(header.encoding, header.payload_bytes, out);
}

}  // namespace lmcache::tier
