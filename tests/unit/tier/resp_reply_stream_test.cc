// RespReplyStream over a socketpair: every reply type, bulk strings placed
// into caller memory or kept, replies split at every byte boundary (a slow
// peer), and malformed or truncated streams refused. The bytes fed are what
// Redis sends (RESP2, as hiredis's own tests spell them).
#include "tier/resp/resp_reply_stream.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace lmcache::tier {
namespace {

struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    reader = UniqueFd(fds[0]);
    writer = UniqueFd(fds[1]);
    timeval tv{2, 0};  // a read that would wait longer is a test failure, not a hang
    setsockopt(reader.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  // Sends `bytes` in pieces of `piece` bytes from another thread.
  std::thread Send(std::string bytes, std::size_t piece) {
    return std::thread([this, bytes = std::move(bytes), piece] {
      for (std::size_t at = 0; at < bytes.size(); at += piece) {
        const std::size_t n = std::min(piece, bytes.size() - at);
        ASSERT_EQ(::write(writer.get(), bytes.data() + at, n), static_cast<ssize_t>(n));
      }
    });
  }
  UniqueFd reader;
  UniqueFd writer;
};

std::string Payload(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 13 + 7);
  return s;
}

TEST(RespReplyStream, ReadsEveryReplyTypeAtEverySplit) {
  const std::string big = Payload(3 * RespReplyStream::kHeadBytes + 11);
  const std::string stream = "+OK\r\n-MOVED 3999 127.0.0.1:6381\r\n:42\r\n$-1\r\n$0\r\n\r\n$" +
                             std::to_string(big.size()) + "\r\n" + big + "\r\n$5\r\nab\r\nc\r\n";
  for (const std::size_t piece :
       {std::size_t{1}, std::size_t{7}, std::size_t{4096}, stream.size()}) {
    Pair pair;
    std::thread sender = pair.Send(stream, piece);
    RespReplyStream replies(pair.reader.get());
    std::string placed(big.size() - 100, '\0');
    std::string arrived;
    std::vector<std::uint64_t> lengths_seen;
    const BulkSink sink = [&](std::size_t index, std::uint64_t length,
                              std::span<const std::byte> head) -> BulkPlacement {
      lengths_seen.push_back(length);
      EXPECT_EQ(head.size(), std::min<std::uint64_t>(length, RespReplyStream::kHeadBytes));
      if (index != 5) return {};  // only the big one is placed, from byte 100 on
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(head.data()), head.size()),
                big.substr(0, head.size()));
      return {
          std::as_writable_bytes(std::span(placed)), 100, [&](std::span<const std::byte> landed) {
            // Each piece is seen once, in order, after it landed.
            EXPECT_EQ(reinterpret_cast<const char*>(landed.data()), placed.data() + arrived.size());
            arrived.append(reinterpret_cast<const char*>(landed.data()), landed.size());
          }};
    };
    using Kind = StreamedReply::Kind;
    auto next = [&](std::size_t i) {
      auto r = replies.Next(i, sink);
      EXPECT_TRUE(r.ok()) << "piece " << piece << " reply " << i << ": " << r.status().ToString();
      return r.ok() ? *r : StreamedReply{};
    };
    StreamedReply r = next(0);
    EXPECT_EQ(r.kind, Kind::kStatus);
    EXPECT_EQ(r.text, "OK");
    r = next(1);
    EXPECT_EQ(r.kind, Kind::kError);
    EXPECT_EQ(r.text, "MOVED 3999 127.0.0.1:6381");
    r = next(2);
    EXPECT_EQ(r.kind, Kind::kInteger);
    EXPECT_EQ(r.integer, 42);
    EXPECT_EQ(next(3).kind, Kind::kNil);
    r = next(4);
    EXPECT_EQ(r.kind, Kind::kBulk);
    EXPECT_EQ(r.length, 0u);
    r = next(5);
    EXPECT_EQ(r.kind, Kind::kBulk);
    EXPECT_TRUE(r.placed);
    EXPECT_EQ(placed, big.substr(100)) << "piece " << piece;
    EXPECT_EQ(arrived, placed) << "piece " << piece;
    r = next(6);  // a CRLF inside a bulk string is data
    EXPECT_FALSE(r.placed);
    EXPECT_EQ(r.text, "ab\r\nc");
    EXPECT_TRUE(replies.drained());
    EXPECT_EQ(lengths_seen, (std::vector<std::uint64_t>{0, big.size(), 5}));
    sender.join();
  }
}

TEST(RespReplyStream, APlacementOfTheWrongSizeIsDiscardedNotOverrun) {
  Pair pair;
  const std::string value = Payload(50000);
  std::thread sender = pair.Send("$50000\r\n" + value + "\r\n:1\r\n", 1000);
  RespReplyStream replies(pair.reader.get());
  std::string small(10, 'x');
  const BulkSink sink = [&](std::size_t, std::uint64_t, std::span<const std::byte>) {
    return BulkPlacement{std::as_writable_bytes(std::span(small)), 0, {}};  // 10 bytes for 50000
  };
  auto r = replies.Next(0, sink);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->placed);
  EXPECT_EQ(small, std::string(10, 'x'));
  auto after = replies.Next(1, sink);  // the stream is still in step
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->integer, 1);
  sender.join();
}

TEST(RespReplyStream, MalformedAndTruncatedStreamsAreErrors) {
  for (const std::string bad :
       {"*2\r\n$1\r\na\r\n$1\r\nb\r\n", "$abc\r\n", "$-5\r\n", "$3\r\nabcd\r\n", "+OK\n",
        "$99999999999\r\n", "\r\n", "?what\r\n"}) {
    Pair pair;
    std::thread sender = pair.Send(bad, bad.size());
    sender.join();
    RespReplyStream replies(pair.reader.get());
    auto r = replies.Next(0, nullptr);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable) << bad;
  }
  // The peer closes in the middle of a bulk string.
  Pair pair;
  std::thread sender = pair.Send("$100\r\nonly part", 100);
  sender.join();
  pair.writer.Reset();
  RespReplyStream replies(pair.reader.get());
  EXPECT_EQ(replies.Next(0, nullptr).status().code(), ErrorCode::kUnavailable);
}

TEST(RespReplyStream, ASilentPeerIsATimeout) {
  Pair pair;
  timeval tv{0, 50'000};
  setsockopt(pair.reader.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  RespReplyStream replies(pair.reader.get());
  EXPECT_EQ(replies.Next(0, nullptr).status().code(), ErrorCode::kTimeout);
}

}  // namespace
}  // namespace lmcache::tier
