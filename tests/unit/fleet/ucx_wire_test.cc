// The data channel's wire form: a reply a member signs decodes; every field
// changed after signing, another key, a malformed header, and bytes other
// than those digested are refused; read ids do not repeat.
#include "fleet/ucx_wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

namespace lmcache::fleet {
namespace {

FleetDataKey KeyOf(std::uint8_t seed) {
  FleetDataKey key;
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(seed + i * 3);
  return key;
}

std::span<const std::uint8_t> Bytes(const ReadReply& reply) {
  return {reinterpret_cast<const std::uint8_t*>(&reply), sizeof(reply)};
}

ReadReply Signed(const DataChannelKeys& keys, const std::vector<std::byte>& bytes) {
  ReadReply reply;
  reply.id = NewReadId();
  reply.size = bytes.size();
  reply.flags = kHasDigest;
  SignReply(keys, bytes, &reply);
  return reply;
}

TEST(UcxWireTest, ASignedReplyDecodesAndItsBytesMatch) {
  const DataChannelKeys keys = DataChannelKeys::From(KeyOf(1));
  const std::vector<std::byte> bytes(1000, std::byte{7});
  const ReadReply reply = Signed(keys, bytes);
  Result<ReadReply> decoded = DecodeReply(keys, Bytes(reply));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->id, reply.id);
  EXPECT_TRUE(ReplyBytesMatch(keys, *decoded, bytes));
}

TEST(UcxWireTest, EveryByteOfTheHeaderIsCovered) {
  const DataChannelKeys keys = DataChannelKeys::From(KeyOf(2));
  const std::vector<std::byte> bytes(64, std::byte{9});
  const ReadReply reply = Signed(keys, bytes);
  for (std::size_t at = 0; at < sizeof(ReadReply); ++at) {
    ReadReply changed = reply;
    reinterpret_cast<std::uint8_t*>(&changed)[at] ^= 0x01;
    EXPECT_FALSE(DecodeReply(keys, Bytes(changed)).ok()) << "byte " << at;
  }
}

TEST(UcxWireTest, AnotherKeysReplyIsRefusedAsUnauthenticated) {
  const std::vector<std::byte> bytes(64, std::byte{9});
  const ReadReply reply = Signed(DataChannelKeys::From(KeyOf(3)), bytes);
  Result<ReadReply> decoded = DecodeReply(DataChannelKeys::From(KeyOf(4)), Bytes(reply));
  EXPECT_EQ(decoded.status().code(), ErrorCode::kPermissionDenied);
}

TEST(UcxWireTest, MalformedHeadersAreRefusedBeforeTheMac) {
  const DataChannelKeys keys = DataChannelKeys::From(KeyOf(5));
  const ReadReply reply = Signed(keys, {});
  std::vector<std::uint8_t> longer(sizeof(ReadReply) + 1);
  std::memcpy(longer.data(), &reply, sizeof(reply));
  EXPECT_EQ(DecodeReply(keys, longer).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(DecodeReply(keys, std::span(longer).first(16)).status().code(),
            ErrorCode::kInvalidArgument);
  ReadReply unknown_flag = reply;
  unknown_flag.flags |= 2;
  SignReply(keys, {}, &unknown_flag);
  EXPECT_EQ(DecodeReply(keys, Bytes(unknown_flag)).status().code(), ErrorCode::kInvalidArgument);
  ReadReply refusal_with_bytes;
  refusal_with_bytes.status = static_cast<std::uint32_t>(ErrorCode::kNotFound);
  refusal_with_bytes.size = 10;
  SignReply(keys, {}, &refusal_with_bytes);
  EXPECT_EQ(DecodeReply(keys, Bytes(refusal_with_bytes)).status().code(),
            ErrorCode::kInvalidArgument);
}

TEST(UcxWireTest, OtherBytesThanTheDigestedOnesDoNotMatch) {
  const DataChannelKeys keys = DataChannelKeys::From(KeyOf(6));
  std::vector<std::byte> bytes(4096, std::byte{1});
  const ReadReply reply = Signed(keys, bytes);
  bytes[4095] = std::byte{0};
  EXPECT_FALSE(ReplyBytesMatch(keys, reply, bytes));
  EXPECT_FALSE(ReplyBytesMatch(keys, reply, std::span(bytes).first(4000)));
  // The digest is bound to the id: the same bytes under another id differ.
  bytes[4095] = std::byte{1};
  ReadReply moved = reply;
  moved.id = NewReadId();
  EXPECT_FALSE(ReplyBytesMatch(keys, moved, bytes));
  // A reply without a digest never vouches for bytes.
  ReadReply bare = reply;
  bare.flags = 0;
  EXPECT_FALSE(ReplyBytesMatch(keys, bare, bytes));
}

TEST(UcxWireTest, RequestsAreSignedOverEveryField) {
  const DataChannelKeys keys = DataChannelKeys::From(KeyOf(7));
  ReadRequest request;
  request.id = NewReadId();
  request.offset = 4096;
  request.size = 1 << 20;
  request.task = 42;
  request.flags = kWantDigest;
  SignRequest(keys, &request);
  EXPECT_TRUE(RequestSigned(keys, request));
  EXPECT_FALSE(RequestSigned(DataChannelKeys::From(KeyOf(8)), request));
  for (std::size_t at = 0; at < sizeof(ReadRequest); ++at) {
    ReadRequest changed = request;
    reinterpret_cast<std::uint8_t*>(&changed)[at] ^= 0x80;
    EXPECT_FALSE(RequestSigned(keys, changed)) << "byte " << at;
  }
}

TEST(UcxWireTest, ReadIdsDoNotRepeat) {
  std::set<ReadId> seen;
  for (int i = 0; i < 10000; ++i) EXPECT_TRUE(seen.insert(NewReadId()).second);
}

}  // namespace
}  // namespace lmcache::fleet
