// The transport-free view of one request: who sent it, over what, and its
// payload frames; and the reply frames that go back.
//
// RouterLoop fills a RequestContext from the ZMQ message (the connection is
// the socket plus the peer's routing id, so it names one client socket for
// as long as it stays connected); in-process tests make their own.
// Thread-safety: plain values; the views point into frames the caller keeps
// alive for the duration of the call.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "lmcache/status.h"

namespace lmcache::transport {

// Where a request runs (reference spec 16).
enum class Pool : std::uint8_t {
  kInline,    // on the loop thread: cheap, never blocks
  kAffinity,  // transfer pool, one ordered queue per client (--max-gpu-workers)
  kCpu,       // general pool (--max-cpu-workers)
};

// kHttp: the operator's HTTP endpoint, whose own admin gate (token, or
// --http-admin-open) has let the request through.
enum class Transport : std::uint8_t { kTcp, kIpc, kInproc, kHttp };
// Whether a peer address (as getpeername or cpp-httplib prints it) is this
// host's loopback: 127.0.0.0/8, ::1, or IPv4-mapped 127.x.
inline bool IsLoopbackAddress(std::string_view address) {
  return address.starts_with("127.") || address == "::1" || address.starts_with("::ffff:127.");
}

inline std::string_view TransportName(Transport transport) {
  switch (transport) {
    case Transport::kTcp: return "tcp";
    case Transport::kIpc: return "ipc";
    case Transport::kInproc: return "inproc";
    case Transport::kHttp: return "http";
  }
  return "?";
}

struct RequestContext {
  std::string_view connection;  // opaque, stable while the client stays connected
  Transport transport = Transport::kIpc;
  bool local_peer = true;  // ipc, inproc, or tcp from a loopback address
  // The request's uid frame as sent (never decoded): with the connection it
  // names a stream that the client's control frames address.
  std::string_view uid;
  // The connection had closed before this request was read (it was still
  // queued in the socket): its answer goes nowhere, and nothing it opens
  // would ever see the close (a stream must not be opened for it).
  bool connection_closed = false;
  // Came over the fleet endpoint, whose connections all proved the fleet key
  // (RouterLoop's FleetEndpointConfig): a member of this server's fleet.
  bool fleet_member = false;
  // The model whose endpoint (--model-url) it came over, whose chunk size
  // that endpoint's get_chunk_size answers; empty on every other endpoint.
  // Views the endpoint's own string, which lives as long as the RouterLoop
  // (after its pools stop): a parked request may keep it.
  std::string_view endpoint_model;
};

using Payloads = std::span<const std::string_view>;

// What a reply is. A request gets exactly one final reply (kFinal or
// kStreamEnd); a streaming operation's request may get any number of
// kStreamItem replies before it, each [uid, operation, value] with the
// request still open (the reference's MessagingStream items). kStreamEnd is
// the reference's end-of-stream marker: [uid, operation] and no value frame.
enum class ReplyKind : std::uint8_t { kFinal, kStreamItem, kStreamEnd };

// Frames 3 and 4 of a reply: the value, and for a failed request the error map.
struct ReplyFrames {
  std::string value;
  std::optional<std::string> error;
  ReplyKind kind = ReplyKind::kFinal;
};

// A client's control frame for one of its streams, [uid, b"", signal] (an
// empty operation frame): kAck grants the stream its next item (one credit),
// kCancel ends it. Control frames get no reply of their own.
enum class StreamSignal : std::uint8_t { kAck, kCancel };

}  // namespace lmcache::transport
