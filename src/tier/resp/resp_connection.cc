#include "tier/resp/resp_connection.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <sys/time.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/host_port.h"
#include "common/mask_secrets.h"

namespace lmcache::tier {
namespace {

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// "host[:port]" of a redis:// URL or a cluster node name (port 6379 by default).
Status ParseHostPort(std::string_view hostport, std::string_view url, RespEndpoint* endpoint) {
  auto parsed = lmcache::ParseHostPort(hostport, 6379);
  if (!parsed.ok()) {
    return InvalidConfig("'" + MaskSecrets(url) + "': " + parsed.status().message());
  }
  endpoint->host = std::move(parsed->host);
  endpoint->port = parsed->port;
  return Status::Ok();
}

}  // namespace

std::string RespEndpoint::Name() const {
  if (!unix_path.empty()) return "unix:" + unix_path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<RespEndpoint> ParseRespUrl(std::string_view url, RespCredentials* credentials) {
  RespEndpoint endpoint;
  if (url.starts_with("unix://")) {
    endpoint.unix_path = std::string(url.substr(7));
    if (endpoint.unix_path.empty() || endpoint.unix_path.front() != '/') {
      return InvalidConfig("'" + MaskSecrets(url) + "': a unix:// URL names an absolute path");
    }
    return endpoint;
  }
  std::string_view rest = url;
  if (rest.starts_with("redis://")) {
    rest.remove_prefix(8);
  } else if (rest.find("://") != std::string_view::npos) {
    return InvalidConfig("'" + MaskSecrets(url) +
                         "': the scheme must be redis:// or unix:// (TLS is not supported)");
  }
  if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const std::size_t colon = userinfo.find(':');
    if (credentials != nullptr) {
      if (colon == std::string_view::npos) {
        credentials->password = std::string(userinfo);
      } else {
        credentials->username = std::string(userinfo.substr(0, colon));
        credentials->password = std::string(userinfo.substr(colon + 1));
      }
    }
  }
  if (const std::size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      int n = -1;
      const auto [end, ec] = std::from_chars(db.data(), db.data() + db.size(), n);
      if (ec != std::errc() || end != db.data() + db.size() || n < 0 || n > 65535) {
        return InvalidConfig("'" + MaskSecrets(url) + "': the database after / must be a number");
      }
      if (credentials != nullptr) credentials->db = n;
    }
  }
  LMC_RETURN_IF_ERROR(ParseHostPort(rest, url, &endpoint));
  return endpoint;
}

void ReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

std::string_view ReplyText(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_STATUS || reply.type == REDIS_REPLY_ERROR ||
      reply.type == REDIS_REPLY_STRING) {
    return {reply.str, reply.len};
  }
  return {};
}

bool IsErrorReply(const redisReply& reply) { return reply.type == REDIS_REPLY_ERROR; }

RespConnection::RespConnection(redisContext* context) : context_(context) {}

RespConnection::RespConnection(RespConnection&& other) noexcept
    : context_(std::exchange(other.context_, nullptr)), broken_(other.broken_) {}

RespConnection& RespConnection::operator=(RespConnection&& other) noexcept {
  if (this != &other) {
    if (context_ != nullptr) redisFree(context_);
    context_ = std::exchange(other.context_, nullptr);
    broken_ = other.broken_;
  }
  return *this;
}

RespConnection::~RespConnection() {
  if (context_ != nullptr) redisFree(context_);
}

Result<RespConnection> RespConnection::Open(const RespEndpoint& endpoint,
                                            const RespCredentials& credentials,
                                            const RespTimeouts& timeouts) {
  const timeval connect_tv = ToTimeval(timeouts.connect);
  redisContext* raw =
      endpoint.unix_path.empty()
          ? redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, connect_tv)
          : redisConnectUnixWithTimeout(endpoint.unix_path.c_str(), connect_tv);
  if (raw == nullptr)
    return Status(ErrorCode::kOutOfMemory, "hiredis could not allocate a context");
  RespConnection connection(raw);
  if (raw->err != 0) {
    return Status(ErrorCode::kUnavailable,
                  "cannot connect to " + endpoint.Name() + ": " + std::string(raw->errstr));
  }
  if (redisSetTimeout(raw, ToTimeval(timeouts.command)) != REDIS_OK) {
    return connection.TransportError("setting the command timeout");
  }
  // TCP keepalive finds a peer that vanished without a FIN; a unix socket has
  // no such option (and hiredis would mark the context failed).
  if (endpoint.unix_path.empty() && redisEnableKeepAlive(raw) != REDIS_OK) {
    return connection.TransportError("enabling TCP keepalive");
  }
  std::vector<RespCommand> setup;
  if (!credentials.password.empty()) {
    RespCommand auth;
    auth.args[auth.argc++] = "AUTH";
    if (!credentials.username.empty()) auth.args[auth.argc++] = credentials.username;
    auth.args[auth.argc++] = credentials.password;
    setup.push_back(auth);
  }
  const std::string db = std::to_string(credentials.db);
  if (credentials.db != 0) {
    RespCommand select;
    select.args[select.argc++] = "SELECT";
    select.args[select.argc++] = db;
    setup.push_back(select);
  }
  if (!setup.empty()) {
    LMC_ASSIGN_OR_RETURN(auto replies, connection.Pipeline(setup));
    for (const RespReply& reply : replies) {
      if (IsErrorReply(*reply)) {
        return Status(
            ErrorCode::kPermissionDenied,
            endpoint.Name() + " refused the connection's setup: " + std::string(ReplyText(*reply)));
      }
    }
  }
  return connection;
}

Status RespConnection::TransportError(std::string_view what) {
  broken_ = true;
  const bool timeout = context_->err == REDIS_ERR_IO &&
                       (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT);
  return Status(timeout ? ErrorCode::kTimeout : ErrorCode::kUnavailable,
                std::string(what) + ": " + std::string(context_->errstr));
}

Status RespConnection::Write(RespRequest& request) {
  const std::vector<iovec>& pieces = request.Pieces();
  std::vector<iovec> left(pieces.begin(), pieces.end());
  std::size_t first = 0;
  while (first < left.size()) {
    const int count = static_cast<int>(std::min<std::size_t>(left.size() - first, IOV_MAX));
    const ssize_t n = ::writev(context_->fd, left.data() + first, count);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      broken_ = true;
      const bool timeout = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      return Status(timeout ? ErrorCode::kTimeout : ErrorCode::kUnavailable,
                    std::string("sending commands: ") + (timeout  ? "timed out"
                                                         : n == 0 ? "nothing written"
                                                                  : std::strerror(errno)));
    }
    auto written = static_cast<std::size_t>(n);
    while (first < left.size() && written >= left[first].iov_len) {
      written -= left[first].iov_len;
      ++first;
    }
    if (written > 0) {  // part of one piece went
      left[first].iov_base = static_cast<char*>(left[first].iov_base) + written;
      left[first].iov_len -= written;
    }
  }
  return Status::Ok();
}

Result<std::vector<RespReply>> RespConnection::Pipeline(std::span<const RespCommand> commands) {
  if (broken_) return Status(ErrorCode::kUnavailable, "the connection is broken");
  RespRequest request;
  for (const RespCommand& command : commands) request.Add(command);
  LMC_RETURN_IF_ERROR(Write(request));
  // hiredis's output buffer stays empty: redisGetReply only reads and parses.
  std::vector<RespReply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      return TransportError("reading a reply");
    }
    replies.emplace_back(static_cast<redisReply*>(raw));
  }
  return replies;
}

Result<std::vector<StreamedReply>> RespConnection::PipelineStreamed(
    std::span<const RespCommand> commands, const BulkSink& sink) {
  if (broken_) return Status(ErrorCode::kUnavailable, "the connection is broken");
  RespRequest request;
  for (const RespCommand& command : commands) request.Add(command);
  LMC_RETURN_IF_ERROR(Write(request));
  // hiredis's reader holds no byte here: every earlier pipeline read exactly
  // its replies, and Redis sends nothing unasked.
  RespReplyStream stream(context_->fd);
  std::vector<StreamedReply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    auto reply = stream.Next(i, sink);
    if (!reply.ok()) {
      broken_ = true;
      return reply.status();
    }
    replies.push_back(std::move(reply).value());
  }
  if (!stream.drained()) {  // bytes nobody asked for: the stream is out of step
    broken_ = true;
    return Status(ErrorCode::kUnavailable, "redis sent more than the replies asked for");
  }
  return replies;
}

}  // namespace lmcache::tier
