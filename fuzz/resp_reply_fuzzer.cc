// libFuzzer target: RespReplyStream (tier/resp/resp_reply_stream.h), which reads
// whatever a Redis node, or anything listening where one was configured,
// sends back. The bytes arrive through a real socket, as in production. A
// sink places bulk strings the way the resp adapter does: when the head
// parses as an object header whose lengths match, the payload goes into a
// buffer of exactly its size. Beyond "no crash, no sanitizer report": a
// placed string filled exactly its target, and a reply stream never yields
// a reply after an error.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <vector>

#include "common/unique_fd.h"
#include "tier/object_format.h"
#include "tier/resp/resp_reply_stream.h"

namespace {

using namespace lmcache;

void Check(bool condition) {
  if (!condition) std::abort();
}

constexpr std::size_t kMaxInput = 128 << 10;  // fits the socket's buffer: one write

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInput) return 0;
  int fds[2];
  Check(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  UniqueFd reader(fds[0]);
  UniqueFd writer(fds[1]);
  const int buffer = 4 * kMaxInput;
  setsockopt(writer.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  if (size > 0) Check(::write(writer.get(), data, size) == static_cast<ssize_t>(size));
  writer.Reset();  // the peer is gone after these bytes: no read can wait

  tier::RespReplyStream stream(reader.get());
  std::vector<std::byte> payload;
  std::optional<tier::ObjectHeader> header;
  std::uint64_t placed_length = 0;
  const tier::BulkSink sink = [&](std::size_t, std::uint64_t length,
                                  std::span<const std::byte> head) -> tier::BulkPlacement {
    header.reset();
    auto parsed = tier::ParseObjectHeader(head);
    if (!parsed.ok() || parsed->header_bytes + parsed->payload_bytes != length) return {};
    payload.assign(parsed->payload_bytes, std::byte{0});
    placed_length = length;
    const std::uint64_t skip = parsed->header_bytes;
    header = std::move(parsed).value();
    return {payload, skip};
  };
  for (std::size_t i = 0; i < 64; ++i) {
    auto reply = stream.Next(i, sink);
    if (!reply.ok()) break;
    if (reply->kind == tier::StreamedReply::Kind::kBulk && reply->placed) {
      Check(header.has_value() && placed_length == reply->length);
      Check(header->header_bytes + payload.size() == reply->length);
      (void)tier::VerifyObject(*header, header->key, payload);
    }
    if (reply->kind != tier::StreamedReply::Kind::kBulk) Check(!reply->placed);
  }
  return 0;
}
