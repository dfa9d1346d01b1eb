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

}  // namespace
}  // namespace lmcache::tier
