// RespRequest against hiredis's own formatter (redisFormatCommandArgv, the
// encoder every hiredis client sends with): the bytes a writev of the pieces
// sends are exactly the bytes hiredis would have sent for the same commands,
// with a continued argument equal to its two parts joined. And the large
// parts are referenced, not copied.
#include "tier/resp/resp_request.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <string>
#include <vector>

namespace lmcache::tier {
namespace {

std::string HiredisFormat(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  char* formatted = nullptr;
  const long long n = redisFormatCommandArgv(&formatted, static_cast<int>(args.size()),
                                             argv.data(), lengths.data());
  std::string bytes(formatted, static_cast<std::size_t>(n));
  redisFreeCommand(formatted);
  return bytes;
}

std::string Joined(RespRequest& request) {
  std::string bytes;
  for (const iovec& piece : request.Pieces()) {
    bytes.append(static_cast<const char*>(piece.iov_base), piece.iov_len);
  }
  return bytes;
}

TEST(RespRequest, SendsWhatHiredisSendsForAPipeline) {
  const std::string key = "lmcache:{00ff}@org/model@0x01000100@0";
  const std::string header(96, 'h');
  std::string payload(3 * RespRequest::kReferenceBytes + 5, '\0');
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 31);
  const std::string binary_key("a\r\nb\0c", 6);  // RESP is length-prefixed: any bytes

  RespCommand set;
  set.args = {"SET", key, header, "EX", "3600"};
  set.argc = 5;
  set.continued = 2;
  set.continuation = payload;
  RespCommand get;
  get.args = {"GET", binary_key};
  get.argc = 2;
  RespCommand empty_value;
  empty_value.args = {"SET", "k", ""};
  empty_value.argc = 3;

  RespRequest request;
  request.Add(set);
  request.Add(get);
  request.Add(empty_value);
  const std::string expected = HiredisFormat({"SET", key, header + payload, "EX", "3600"}) +
                               HiredisFormat({"GET", binary_key}) +
                               HiredisFormat({"SET", "k", ""});
  EXPECT_EQ(Joined(request), expected);
  EXPECT_EQ(request.bytes(), expected.size());
}

TEST(RespRequest, LargeArgumentsAreReferencedInPlace) {
  const std::string small(RespRequest::kReferenceBytes - 1, 's');
  const std::string large(RespRequest::kReferenceBytes, 'L');
  RespCommand command;
  command.args = {"SET", small, large};
  command.argc = 3;
  RespRequest request;
  request.Add(command);
  int referenced = 0;
  for (const iovec& piece : request.Pieces()) {
    if (piece.iov_base == large.data()) {
      EXPECT_EQ(piece.iov_len, large.size());
      ++referenced;
    }
    // The small argument was copied: no piece points into it.
    EXPECT_FALSE(piece.iov_base >= small.data() && piece.iov_base < small.data() + small.size());
  }
  EXPECT_EQ(referenced, 1);
  // Owned pieces are merged: header, small argument and the bulk header of
  // the large one are one piece, the large one the second, its CRLF the third.
  EXPECT_EQ(request.Pieces().size(), 3u);
}

}  // namespace
}  // namespace lmcache::tier
