#include "tier/resp/resp_reply_stream.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace lmcache::tier {
namespace {

constexpr std::size_t kBufferBytes = 64 << 10;  // > kHeadBytes + a line

Status Protocol(const std::string& what) {
  return Status(ErrorCode::kUnavailable, "redis protocol error: " + what);
}

}  // namespace

RespReplyStream::RespReplyStream(int fd) : fd_(fd), buffer_(kBufferBytes) {}

Status RespReplyStream::ReadFailure(long result) {
  if (result == 0) return Status(ErrorCode::kUnavailable, "redis closed the connection");
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    return Status(ErrorCode::kTimeout, "reading a reply: timed out");
  }
  return Status(ErrorCode::kUnavailable, std::string("reading a reply: ") + std::strerror(errno));
}

Status RespReplyStream::Fill(std::size_t bytes) {
  if (end_ - begin_ >= bytes) return Status::Ok();
  if (begin_ > 0) {  // keep the unread bytes at the front
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  while (end_ < bytes) {
    const ssize_t n = ::recv(fd_, buffer_.data() + end_, buffer_.size() - end_, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ReadFailure(n);
    end_ += static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Result<std::string_view> RespReplyStream::Line() {
  std::size_t scanned = 0;  // unread bytes known to hold no '\n'
  while (true) {
    const char* from = buffer_.data() + begin_ + scanned;
    const auto* found = static_cast<const char*>(std::memchr(from, '\n', end_ - begin_ - scanned));
    if (found != nullptr) {
      const std::size_t stop = static_cast<std::size_t>(found - buffer_.data());
      if (stop == begin_ || buffer_[stop - 1] != '\r') return Protocol("a line not ended by CRLF");
      const std::string_view line(buffer_.data() + begin_, stop - 1 - begin_);
      begin_ = stop + 1;
      return line;
    }
    scanned = end_ - begin_;
    if (scanned >= buffer_.size()) return Protocol("a reply line longer than 64 KiB");
    LMC_RETURN_IF_ERROR(Fill(scanned + 1));  // moves the unread bytes to the front
  }
}

Status RespReplyStream::ReadInto(std::span<std::byte> to,
                                 const std::function<void(std::span<const std::byte>)>& arrived) {
  const std::size_t buffered = std::min(to.size(), end_ - begin_);
  std::memcpy(to.data(), buffer_.data() + begin_, buffered);
  begin_ += buffered;
  if (arrived && buffered > 0) arrived(to.first(buffered));
  std::size_t done = buffered;
  while (done < to.size()) {
    const ssize_t n = ::recv(fd_, to.data() + done, to.size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ReadFailure(n);
    if (arrived) arrived(to.subspan(done, static_cast<std::size_t>(n)));
    done += static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Status RespReplyStream::Discard(std::uint64_t bytes) {
  while (bytes > 0) {
    if (begin_ == end_) LMC_RETURN_IF_ERROR(Fill(1));
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, end_ - begin_));
    begin_ += take;
    bytes -= take;
  }
  return Status::Ok();
}

Status RespReplyStream::ReadBulk(std::size_t index, std::uint64_t length, const BulkSink& sink,
                                 StreamedReply* reply) {
  const std::size_t head = static_cast<std::size_t>(std::min<std::uint64_t>(length, kHeadBytes));
  LMC_RETURN_IF_ERROR(Fill(head));
  const auto* head_bytes = reinterpret_cast<const std::byte*>(buffer_.data() + begin_);
  const BulkPlacement place = sink ? sink(index, length, std::span(head_bytes, head))
                                   : BulkPlacement{};
  const bool fits = !place.to.empty() && place.skip <= length &&
                    place.to.size() == length - place.skip;
  if (fits) {
    LMC_RETURN_IF_ERROR(Discard(place.skip));
    LMC_RETURN_IF_ERROR(ReadInto(place.to, place.arrived));
    reply->placed = true;
  } else {
    reply->text.assign(buffer_.data() + begin_, head);
    LMC_RETURN_IF_ERROR(Discard(length));
  }
  LMC_RETURN_IF_ERROR(Fill(2));
  if (buffer_[begin_] != '\r' || buffer_[begin_ + 1] != '\n') {
    return Protocol("a bulk string not ended by CRLF");
  }
  begin_ += 2;
  return Status::Ok();
}

Result<StreamedReply> RespReplyStream::Next(std::size_t index, const BulkSink& sink) {
  LMC_ASSIGN_OR_RETURN(const std::string_view line, Line());
  if (line.empty()) return Protocol("an empty reply line");
  StreamedReply reply;
  const std::string_view body = line.substr(1);
  switch (line[0]) {
    case '+':
    case '-':
      reply.kind = line[0] == '+' ? StreamedReply::Kind::kStatus : StreamedReply::Kind::kError;
      reply.text = std::string(body);
      return reply;
    case ':':
    case '$': {
      std::int64_t value = 0;
      const auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), value);
      if (ec != std::errc() || end != body.data() + body.size()) {
        return Protocol("a malformed number '" + std::string(body) + "'");
      }
      if (line[0] == ':') {
        reply.kind = StreamedReply::Kind::kInteger;
        reply.integer = value;
        return reply;
      }
      if (value == -1) return reply;  // nil
      if (value < 0 || static_cast<std::uint64_t>(value) > kMaxBulkBytes) {
        return Protocol("a bulk string of " + std::string(body) + " bytes");
      }
      reply.kind = StreamedReply::Kind::kBulk;
      reply.length = static_cast<std::uint64_t>(value);
      LMC_RETURN_IF_ERROR(ReadBulk(index, reply.length, sink, &reply));
      return reply;
    }
    default:
      return Protocol("an unexpected reply type '" + std::string(1, line[0]) + "'");
  }
}

}  // namespace lmcache::tier
