// PeerRpc: this server's calls to its peers' fleet endpoints (issue 42,
// sections 3 and 4): the handshake (server_info) and the reference's peer
// operations (p2p_lookup_and_lock, p2p_query_lookup_results,
// p2p_unlock_objects), as a member that proved the fleet key.
//
// One thread owns every peer's socket: a ZMQ DEALER each, a CURVE client
// with the members' key pair towards the fleet's server key
// (fleet/fleet_key.h), so a peer without the key is never connected to. A
// call never blocks its caller: Call queues the request and returns; the
// thread sends it and runs `done` with the reply's value frame, the error
// the peer answered, kUnavailable when the peer's connection closes first
// (a peer that died or restarted holding the call, or that refused our key:
// each socket's monitor reports it, and no reply can come then), or
// kTimeout at the call's deadline (a peer that hangs, or is down when the
// call is sent: ZMQ reconnects in the background, and a later call reaches
// the peer once it is back). A reply that comes after
// its deadline, or that matches no call of ours (another request id or
// operation frame), is dropped and counted. A peer is untrusted: each frame
// of a reply is bounded (kMaxReplyBytes, ZMQ_MAXMSGSIZE: ZMQ drops the
// connection of a peer that sends more; a reply has at most four frames to
// be read as one) and its frames are checked before `done` sees them. The
// thread reads whatever arrives as it comes, so a member that floods us
// costs this thread's time, not unbounded memory beyond ZMQ's receive queue
// (a member holds the fleet key: docs/security.md, one trust domain).
//
// Thread-safety: Connect, Disconnect, Call and Stats from any thread.
// `done` runs on the RPC thread, exactly once per call, and must not block;
// a call made once the RPC has stopped (from a completion run while it ends
// its calls, or any later one) ends at once, with `done` run on the
// caller's thread: a caller must not hold a lock its `done` takes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "fleet/fleet_key.h"
#include "fleet/fleet_stats.h"
#include "lmcache/protocol.h"
#include "lmcache/status.h"

namespace lmcache::fleet {

// The largest frame a peer may send (a p2p_query_lookup_results of a long
// prompt's keys is some hundreds of KiB).
inline constexpr std::int64_t kMaxReplyBytes = 16 << 20;

using PeerId = std::uint64_t;


class PeerRpc {
 public:
  // The value frame of a reply (one msgpack value), or why there is none.
  using Done = std::function<void(Result<std::string>)>;

  // Told, on the RPC's thread, that a peer's connection closed (after its
  // calls in flight ended); it must not block.
  using ClosedObserver = std::function<void(PeerId)>;

  // `key` gives the CURVE pairs; `clock` measures deadlines and must
  // outlive the PeerRpc; `on_closed`, if given, must too.
  // `max_peers` sizes the ZMQ context's socket limit (a peer costs a
  // DEALER and its monitor's PAIR): a connection past it fails, and its
  // calls end with the cause.
  static Result<std::unique_ptr<PeerRpc>> Start(const FleetKey& key, const Clock* clock,
                                                ClosedObserver on_closed = {},
                                                std::size_t max_peers = 256);
  ~PeerRpc();  // ends every call in flight with kUnavailable, closes every socket
  PeerRpc(const PeerRpc&) = delete;
  PeerRpc& operator=(const PeerRpc&) = delete;

  // A connection to the fleet endpoint at `url` (tcp://HOST:PORT); it is
  // made in the background. Ids are never reused.
  PeerId Connect(const std::string& url);
  // Closes it; its calls in flight end with kUnavailable.
  void Disconnect(PeerId peer);
  // Sends `op` with `payloads` (each one encoded msgpack value) to `peer`;
  // `done` runs once, at the latest at `deadline_ms`. The operation frame
  // is the reference's integer id for ops 1-34, else the operation's name.
  void Call(PeerId peer, Op op, std::vector<std::string> payloads, TimeMs deadline_ms, Done done);

  // Ends every call in flight with kUnavailable, now; later calls end at
  // once, on the caller's thread (see above). Idempotent; the destructor
  // stops too.
  void Stop();

  PeerRpcStats Stats() const;

 private:
  struct Impl;
  explicit PeerRpc(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmcache::fleet
