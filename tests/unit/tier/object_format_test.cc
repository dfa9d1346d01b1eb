// ObjectFormat: a header names the whole key and checksums header and
// payload; anything damaged, truncated or naming another key is refused.
#include "tier/object_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fakes/keys.h"

namespace lmcache::tier {
namespace {

std::vector<std::byte> Payload(std::size_t n) {
  std::vector<std::byte> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = std::byte(static_cast<unsigned char>(i * 7 + 1));
  return p;
}

store::ObjectKey FullKey() {
  store::ObjectKey key = testing::KeyN(42, "org/model-7B");
  key.kv_rank = (2 << 24) | (1 << 16) | (2 << 8) | 1;
  key.object_group_id = 3;
  key.cache_salt = "tenant-a";
  return key;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(ObjectFormatTest, RoundTripsEveryKeyFieldAndVerifiesThePayload) {
  const store::ObjectKey key = FullKey();
  const auto payload = Payload(1000);
  const std::string header = EncodeObjectHeader(key, payload, 1);
  auto parsed = ParseObjectHeader(Bytes(header));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->key, key);
  EXPECT_EQ(parsed->payload_bytes, 1000u);
  EXPECT_EQ(parsed->header_bytes, header.size());
  EXPECT_TRUE(VerifyObject(*parsed, key, payload).ok());
}

// A tagged object's header names its tags (version 3, which a server from
// before tags refuses instead of serving it untagged); an untagged one stays
// version 2, which such a server still reads.
TEST(ObjectFormatTest, TagsRoundTripInAVersionThreeHeaderAndUntaggedStaysVersionTwo) {
  store::ObjectKey tagged = FullKey();
  tagged.tags = "application_version%v2%tenant%a";
  const auto payload = Payload(100);
  const std::string header = EncodeObjectHeader(tagged, payload, 512);
  std::uint32_t version = 0;
  std::memcpy(&version, header.data() + 8, sizeof(version));
  EXPECT_EQ(version, 3u);
  auto parsed = ParseObjectHeader(Bytes(header));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->key, tagged);
  store::ObjectKey untagged = FullKey();
  EXPECT_FALSE(VerifyObject(*parsed, untagged, payload).ok()) << "served to an untagged request";
  const std::string plain = EncodeObjectHeader(untagged, payload, 512);
  std::memcpy(&version, plain.data() + 8, sizeof(version));
  EXPECT_EQ(version, 2u);
  auto plain_parsed = ParseObjectHeader(Bytes(plain));
  ASSERT_TRUE(plain_parsed.ok());
  EXPECT_TRUE(plain_parsed->key.tags.empty());
}

TEST(ObjectFormatTest, HeaderIsPaddedToTheAlignment) {
  const std::string header = EncodeObjectHeader(FullKey(), Payload(10), 4096);
  EXPECT_EQ(header.size(), 4096u);
  EXPECT_TRUE(ParseObjectHeader(Bytes(header)).ok());
}

TEST(ObjectFormatTest, AnyFlippedHeaderByteIsDetected) {
  const std::string header = EncodeObjectHeader(FullKey(), Payload(64), 1);
  for (std::size_t i = 0; i < header.size(); ++i) {
    std::string damaged = header;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x01);
    auto parsed = ParseObjectHeader(Bytes(damaged));
    EXPECT_FALSE(parsed.ok()) << "byte " << i;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), ErrorCode::kCorrupt);
    }
  }
}

TEST(ObjectFormatTest, TruncationAndPayloadDamageAndAnotherKeyAreRefused) {
  const store::ObjectKey key = FullKey();
  auto payload = Payload(256);
  const std::string header = EncodeObjectHeader(key, payload, 1);
  for (std::size_t cut : {std::size_t{0}, std::size_t{10}, kHeaderFixedBytes, header.size() - 1}) {
    EXPECT_FALSE(ParseObjectHeader(Bytes(header).first(cut)).ok()) << cut;
  }
  auto parsed = ParseObjectHeader(Bytes(header));
  ASSERT_TRUE(parsed.ok());
  auto flipped = payload;
  flipped[200] ^= std::byte{0x80};
  EXPECT_EQ(VerifyObject(*parsed, key, flipped).code(), ErrorCode::kCorrupt);
  EXPECT_EQ(VerifyObject(*parsed, key, std::span(payload).first(255)).code(), ErrorCode::kCorrupt);
  store::ObjectKey other = key;
  other.cache_salt = "tenant-b";
  EXPECT_EQ(VerifyObject(*parsed, other, payload).code(), ErrorCode::kCorrupt);
}

// The resp adapter checksums a payload as its pieces arrive from the socket:
// any split gives PayloadChecksum's value, and VerifyObjectSummed refuses
// what VerifyObject refuses.
TEST(ObjectFormatTest, APayloadChecksummedInPiecesIsTheSame) {
  std::vector<std::byte> payload(100'000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = std::byte(static_cast<unsigned char>(i * 31 + 1));
  const std::uint64_t whole = PayloadChecksum(payload);
  for (const std::size_t piece : {std::size_t{1} << 20, std::size_t{4096}, std::size_t{333}, std::size_t{1}}) {
    PayloadChecksummer summer;
    for (std::size_t at = 0; at < payload.size(); at += piece) {
      summer.Add(std::span(payload).subspan(at, std::min(piece, payload.size() - at)));
    }
    EXPECT_EQ(summer.Digest(), whole) << piece;
    EXPECT_EQ(summer.bytes(), payload.size());
  }
  const store::ObjectKey key = testing::KeyN(4);
  const std::string header_bytes = EncodeObjectHeader(key, payload, 1);
  auto header = ParseObjectHeader(std::as_bytes(std::span(header_bytes.data(), header_bytes.size())));
  ASSERT_TRUE(header.ok());
  EXPECT_TRUE(VerifyObjectSummed(*header, key, payload.size(), whole).ok());
  EXPECT_EQ(VerifyObjectSummed(*header, key, payload.size(), whole ^ 1).code(), ErrorCode::kCorrupt);
  EXPECT_EQ(VerifyObjectSummed(*header, key, payload.size() - 1, whole).code(), ErrorCode::kCorrupt);
  EXPECT_EQ(VerifyObjectSummed(*header, testing::KeyN(5), payload.size(), whole).code(),
            ErrorCode::kCorrupt);
}

TEST(ObjectFormatTest, AnAbsurdHeaderLengthIsRefusedBeforeReading) {
  std::string header = EncodeObjectHeader(FullKey(), Payload(8), 1);
  const std::uint32_t huge = 1u << 30;
  std::memcpy(header.data() + 12, &huge, sizeof(huge));
  auto parsed = ParseObjectHeader(Bytes(header));
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("out of range"), std::string::npos);
}

// Issue 64: an encoded object's header (version 4) records how it was
// stored, so any reader decodes it; its size follows from the key; what a
// header says of its encoding is checked before anything is decoded.
TEST(ObjectFormatTest, AnEncodedObjectsHeaderRecordsItsEncodingAndDecodesOnLoad) {
  for (const bool tagged : {false, true}) {
    store::ObjectKey key = FullKey();
    if (tagged) key.tags = "tenant%a";
    std::vector<std::byte> object(1000);
    for (std::size_t i = 0; i < object.size(); i += 2) {
      object[i + 1] = std::byte{0x3F};  // bfloat16 1.0 and its neighbours: fp8 values
      object[i] = std::byte(static_cast<unsigned char>((i % 8) << 4));
    }
    std::vector<std::byte> payload(500);
    ASSERT_EQ(*EncodePayload(PayloadCodec::kFp8E4M3, ElementType::kBFloat16, object, payload),
              500u);
    const PayloadEncoding encoding{PayloadCodec::kFp8E4M3, ElementType::kBFloat16, 1000};
    const std::string header = EncodeObjectHeader(key, payload, 8, encoding);
    EXPECT_EQ(header.size(), EncodedObjectHeaderBytes(key));
    EXPECT_EQ(header.size() % kEncodedHeaderAlign, 0u) << "padded whatever the alignment asked";
    std::uint32_t version = 0;
    std::memcpy(&version, header.data() + 8, sizeof(version));
    EXPECT_EQ(version, 4u);
    auto parsed = ParseObjectHeader(Bytes(header));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(parsed->key, key);
    EXPECT_EQ(parsed->encoding, encoding);
    EXPECT_EQ(parsed->payload_bytes, 500u);
    EXPECT_EQ(parsed->object_bytes(), 1000u);
    std::vector<std::byte> out(1000, std::byte{0x77});
    std::copy(payload.begin(), payload.end(), out.begin());
    ASSERT_TRUE(VerifyAndDecode(*parsed, key, out).ok());
    EXPECT_EQ(out, object);
    std::vector<std::byte> wrong_size(999);
    EXPECT_EQ(VerifyAndDecode(*parsed, key, wrong_size).code(), ErrorCode::kCorrupt);
  }
}

TEST(ObjectFormatTest, AVersionFourHeaderWithAnEncodingThatDoesNotFitIsRefused) {
  const store::ObjectKey key = FullKey();
  const std::vector<std::byte> payload(500);
  const PayloadEncoding good{PayloadCodec::kFp8E5M2, ElementType::kFloat32, 2000};
  std::string header = EncodeObjectHeader(key, payload, 1, good);
  ASSERT_TRUE(ParseObjectHeader(Bytes(header)).ok());
  // Encodings that do not fit their payload, each in a header sealed by its
  // own checksum: only the encoding's check stands between them and a decode.
  const PayloadEncoding bad[] = {
      {PayloadCodec::kFp8E5M2, ElementType::kFloat32, 2004},  // 501 elements, 500 bytes
      {PayloadCodec::kFp8E5M2, ElementType::kUnknown, 2000},  // no element type
  };
  for (const PayloadEncoding& e : bad) {
    const std::string h = EncodeObjectHeader(key, payload, 1, e);
    auto parsed = ParseObjectHeader(Bytes(h));
    ASSERT_FALSE(parsed.ok()) << e.raw_bytes;
    EXPECT_EQ(parsed.status().code(), ErrorCode::kCorrupt);
  }
  // A codec from a newer server: not supported, which readers leave alone.
  const std::string newer = EncodeObjectHeader(
      key, payload, 1, {static_cast<PayloadCodec>(9), ElementType::kFloat32, 2000});
  EXPECT_EQ(ParseObjectHeader(Bytes(newer)).status().code(), ErrorCode::kNotSupported);
  // A flipped encoding byte breaks the header's checksum.
  header[104] = static_cast<char>(header[104] ^ 0x03);
  EXPECT_FALSE(ParseObjectHeader(Bytes(header)).ok());
}

TEST(ObjectFormatTest, AnEncodingIsWorthItOnlyWhereItSavesItsHeader) {
  const store::ObjectKey key = FullKey();
  const std::size_t header = EncodedObjectHeaderBytes(key);
  EXPECT_TRUE(EncodingSaves(key, 2 * header, header));
  EXPECT_FALSE(EncodingSaves(key, 2 * header - 2, header - 1));
}

}  // namespace
}  // namespace lmcache::tier
