// RespConnection: one blocking connection to one Redis (or Valkey) node over
// TCP or a unix socket, with a timeout on connect and on every command, and
// commands sent pipelined. hiredis connects and parses the replies; requests
// are written by writev() from a RespRequest, so large values leave from
// where they lie (resp_request.h).
//
// A connection whose transport failed (refused, reset, timed out, a protocol
// error) is broken for good: the caller drops it and opens another, so a
// half-read reply can never be taken for the answer to a later command.
// AUTH and SELECT are sent at connect time from the credentials.
//
// Thread-safety: a connection is used by one thread at a time (the adapter's
// pool hands it out exclusively). Endpoint parsing is a pure function.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"
#include "tier/resp/resp_reply_stream.h"
#include "tier/resp/resp_request.h"

struct redisContext;
struct redisReply;

namespace lmcache::tier {

struct RespEndpoint {
  std::string host;         // TCP host, empty for a unix socket
  int port = 0;
  std::string unix_path;    // set for unix://
  // "host:port" or "unix:/path": how logs and the slot map name the node.
  std::string Name() const;
};

struct RespCredentials {
  std::string username;  // empty: AUTH <password> (Redis < 6 or the default user)
  std::string password;  // empty: no AUTH
  int db = 0;            // SELECT in standalone mode (a cluster has only db 0)
};

struct RespTimeouts {
  std::chrono::milliseconds connect{1000};
  std::chrono::milliseconds command{5000};
};

// redis://[[user]:password@]host[:port][/db], unix:///path, or host:port.
// Credentials and db in the URL are written to *credentials when given.
Result<RespEndpoint> ParseRespUrl(std::string_view url, RespCredentials* credentials);

struct ReplyDeleter {
  void operator()(redisReply* reply) const;
};
using RespReply = std::unique_ptr<redisReply, ReplyDeleter>;

class RespConnection {
 public:
  static Result<RespConnection> Open(const RespEndpoint& endpoint,
                                     const RespCredentials& credentials,
                                     const RespTimeouts& timeouts);
  RespConnection(RespConnection&&) noexcept;
  RespConnection& operator=(RespConnection&&) noexcept;
  ~RespConnection();

  // Sends the commands in one pipeline and reads one reply per command, in
  // order. A reply may be a Redis error (REDIS_REPLY_ERROR): that is an
  // answer, not a transport failure. kUnavailable / kTimeout when the
  // transport failed; the connection is then broken.
  Result<std::vector<RespReply>> Pipeline(std::span<const RespCommand> commands);
  // The same, with the replies read by a RespReplyStream: the bytes of a
  // bulk string reply go where `sink` says (reply i is index i), never
  // through hiredis's buffers. Arrays are not understood here.
  Result<std::vector<StreamedReply>> PipelineStreamed(std::span<const RespCommand> commands,
                                                      const BulkSink& sink);
  bool broken() const { return broken_; }

 private:
  explicit RespConnection(redisContext* context);
  Status TransportError(std::string_view what);
  // Writes the whole request to the socket (the send timeout applies to each
  // writev); on failure the connection is broken.
  Status Write(RespRequest& request);

  redisContext* context_ = nullptr;
  bool broken_ = false;
};

// The text of a status, error or string reply; empty for other types.
std::string_view ReplyText(const redisReply& reply);
bool IsErrorReply(const redisReply& reply);

}  // namespace lmcache::tier
