// S3ObjectReceiver: a GET's body as it arrives, in pieces of any size.
#include "tier/s3/s3_object_receiver.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fakes/keys.h"

namespace lmcache::tier {
namespace {

using lmcache::testing::KeyN;

constexpr std::size_t kObject = 10'000;

std::string Payload() {
  std::string p(kObject, '\0');
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<char>(i * 31 + 7);
  return p;
}

std::string Body(const store::ObjectKey& key) {
  const std::string payload = Payload();
  return EncodeObjectHeader(key, std::as_bytes(std::span(payload)), 8) + payload;
}

S3Response Ok() {
  S3Response r;
  r.http_status = 200;
  return r;
}

// Feeds `body` in pieces of `piece`, declaring `length`; the outcome.
L2LoadOutcome Receive(const store::ObjectKey& key, std::string_view body, std::size_t piece,
                      std::int64_t length, std::vector<std::byte>* out,
                      std::size_t out_size = kObject) {
  out->assign(out_size, std::byte{0});
  S3ObjectReceiver receiver(L2Read{&key, *out});
  S3Response response = Ok();
  for (std::size_t at = 0; at < body.size(); at += piece) {
    const auto bytes = std::as_bytes(std::span(body.substr(at, std::min(piece, body.size() - at))));
    if (!receiver.Accept(at, length, bytes)) {
      response.error = Status(ErrorCode::kCorrupt, "refused");
      break;
    }
  }
  return receiver.Finish(response);
}

TEST(S3ObjectReceiverTest, AnObjectInPiecesOfAnySizeLoads) {
  const store::ObjectKey key = KeyN(1);
  const std::string body = Body(key);
  const std::string payload = Payload();
  for (const std::size_t piece :
       {std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{4096}, body.size()}) {
    std::vector<std::byte> out;
    ASSERT_EQ(Receive(key, body, piece, static_cast<std::int64_t>(body.size()), &out),
              L2LoadOutcome::kLoaded)
        << piece;
    EXPECT_EQ(std::memcmp(out.data(), payload.data(), kObject), 0) << piece;
  }
}

TEST(S3ObjectReceiverTest, ARetriedAttemptStartsOver) {
  const store::ObjectKey key = KeyN(2);
  const std::string body = Body(key);
  std::vector<std::byte> out(kObject);
  S3ObjectReceiver receiver(L2Read{&key, out});
  const auto all = std::as_bytes(std::span(body));
  ASSERT_TRUE(receiver.Accept(0, static_cast<std::int64_t>(body.size()), all.first(5000)));
  ASSERT_TRUE(receiver.Accept(0, static_cast<std::int64_t>(body.size()), all));  // again from 0
  EXPECT_EQ(receiver.Finish(Ok()), L2LoadOutcome::kLoaded);
}

TEST(S3ObjectReceiverTest, WhatIsNotOursIsAMissLeftAlone) {
  const store::ObjectKey key = KeyN(3);
  std::vector<std::byte> out;
  const std::string theirs(20'000, 'x');  // the reference's tensor bytes, say
  EXPECT_EQ(Receive(key, theirs, 4096, 20'000, &out), L2LoadOutcome::kMissing);
  EXPECT_EQ(Receive(key, "tiny", 1, 4, &out), L2LoadOutcome::kMissing);
  EXPECT_EQ(Receive(key, "", 1, 0, &out), L2LoadOutcome::kMissing);
  // Another key's object under this name, or this key at another geometry.
  EXPECT_EQ(Receive(key, Body(KeyN(4)), 4096, -1, &out), L2LoadOutcome::kCorrupt);
  const std::string body = Body(key);
  EXPECT_EQ(Receive(key, body, 4096, static_cast<std::int64_t>(body.size()), &out, kObject / 2),
            L2LoadOutcome::kMissing);
}

TEST(S3ObjectReceiverTest, DamagedOrCutShortObjects) {
  const store::ObjectKey key = KeyN(5);
  std::string body = Body(key);
  std::vector<std::byte> out;
  const auto length = static_cast<std::int64_t>(body.size());
  // Cut short with its length declared: the object is short, and corrupt.
  EXPECT_EQ(
      Receive(key, std::string_view(body).substr(0, body.size() - 10), 4096, length - 10, &out),
      L2LoadOutcome::kCorrupt);
  // Cut short with no length declared: the transfer failed, not the object.
  EXPECT_EQ(Receive(key, std::string_view(body).substr(0, body.size() - 10), 4096, -1, &out),
            L2LoadOutcome::kFailed);
  // Longer than its header says.
  EXPECT_EQ(Receive(key, body + "extra", 4096, -1, &out), L2LoadOutcome::kCorrupt);
  // A flipped payload byte fails the checksum.
  body.back() ^= 1;
  EXPECT_EQ(Receive(key, body, 4096, length, &out), L2LoadOutcome::kCorrupt);
  // Gateway answers.
  S3ObjectReceiver receiver(L2Read{&key, out});
  S3Response missing;
  missing.http_status = 404;
  EXPECT_EQ(receiver.Finish(missing), L2LoadOutcome::kMissing);
  S3Response unreachable;
  unreachable.error = Status(ErrorCode::kUnavailable, "refused");
  EXPECT_EQ(receiver.Finish(unreachable), L2LoadOutcome::kFailed);
}

}  // namespace
}  // namespace lmcache::tier
