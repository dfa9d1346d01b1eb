// RequestHandler: what the transport (RouterLoop) needs from the service.
//
// The loop resolves each request's operation frame to a route (which pool
// runs it, how many payload bytes it may carry), hands the request over, and
// sends the reply frames it gets back; a request it refuses before running
// (malformed, too large, overloaded) still gets the operation's failure
// reply from Refuse(). Nothing here knows ZeroMQ, so the loop can be tested
// with a fake handler and the service without a socket.
//
// Thread-safety: implementations must accept Handle from any number of
// threads at once, and call `done` with a final reply exactly once per
// request, from any thread; a streaming operation may call it before that
// with any number of ReplyKind::kStreamItem replies, never two calls at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "lmcache/status.h"
#include "transport/request.h"
#include "transport/transport_stats.h"

namespace lmcache::transport {

struct RequestRoute {
  Pool pool = Pool::kInline;
  std::size_t max_request_bytes = 0;  // all payload frames together
  std::size_t row = 0;                // the handler's own index of the operation
};

// What the transport counts; exported with the service's statistics.

using ReplyFn = std::function<void(ReplyFrames)>;

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // The route of an operation frame; kUnknownOperation / kMalformedRequest otherwise.
  virtual Result<RequestRoute> Route(std::string_view operation_frame) const = 0;
  // Runs the request; `done` gets its reply frames exactly once. The payload
  // views stay valid until `done` is called.
  virtual void Handle(const RequestRoute& route, const RequestContext& context, Payloads payloads,
                      ReplyFn done) = 0;
  // The reply to a request refused before it ran (`route` is null when the
  // operation itself could not be resolved).
  virtual ReplyFrames Refuse(const RequestRoute* route, const Status& status) = 0;
  // A control frame of the client connection `connection` for its stream
  // `uid` (the request's uid frame). Called on the transport's thread; it
  // gets no reply. A handler without streaming operations ignores it.
  virtual void OnStreamControl(std::string_view connection, std::string_view uid,
                               StreamSignal signal) {
    (void)connection, (void)uid, (void)signal;
  }
  // The client connection closed (its process exited, crashed or hung up),
  // and requests it sent may still be running: those waiting for something
  // should be answered now (their answers go nowhere). Called on the
  // transport's thread as soon as the close is seen.
  virtual void OnClosing(std::string_view connection) = 0;
  // The client connection closed and every request it sent has been
  // answered: whatever it registered is gone. Called on the transport's
  // thread, once per close, and once more after a request read late (after
  // the close) is answered; never from inside another call to the handler
  // or one of its `done` callbacks (which may hold the handler's locks).
  virtual void OnDisconnect(std::string_view connection) = 0;
};

}  // namespace lmcache::transport
