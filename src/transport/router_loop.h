// RouterLoop: the ZeroMQ transport. One thread owns every ROUTER socket.
//
// Create() binds every endpoint before the server touches anything else, and
// refuses to take over one a live server holds: an ipc path is guarded by an
// flock'ed "<path>.lock" file naming its owner's pid plus a probe for a live
// listener, so a socket file a live server listens on is never unlinked; a
// tcp port in use is probed with server_info so the refusal names the
// running lmcache-server's pid.
//
// Run() receives [identity, uid, operation, payload...] messages, resolves
// the operation through the RequestHandler and runs the request inline
// (cheap operations), on the affinity pool keyed by the client identity
// (transfers: one client's transfers run in order on one thread), or on the
// CPU pool. Pools are fair queues: clients are served round robin and each
// client's queued requests are bounded in bytes and count (and all clients'
// together), so a flood is refused with 402 without delaying others. A
// request's frames are kept as received (no copy) until its reply is built.
// Workers never touch a socket: they push finished replies onto a queue and
// wake the loop through an eventfd polled beside the sockets. A socket
// monitor reports each client connection that closes; the loop maps it back
// (by file descriptor) to the connection ids that spoke over it and tells the
// handler, so a dead worker's registration is released at once: once every
// request that connection sent has been answered, so that nothing a request
// still running creates outlives the release (RequestsInFlight). Replies echo
// the uid and operation frames byte for byte and always carry frame 3; a
// failed request carries the operation's failure value in frame 3 and
// {code, message} in an extra frame 4, so every request gets an answer.
// A streaming operation's request may first get items (same frames, the
// request still open) and ends with the end marker [identity, uid,
// operation]; the client's control frames for it, [identity, uid, b"",
// b"ack" | b"cancel"], go to the handler's OnStreamControl and get no reply;
// any other request with an empty operation frame is answered as malformed.
//
// Thread-safety: Run() on one thread; Stop() from any thread (also from a
// signal-handling thread); Stats() from any thread. Everything else is
// private to the loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <sys/types.h>
#include <unordered_map>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/fair_queue.h"
#include "common/mutex.h"
#include "common/thread_pool.h"
#include "common/wake_fd.h"
#include "lmcache/status.h"
#include "transport/accepted_owners.h"
#include "transport/request_handler.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace lmcache::transport {

// The largest frame the transport reads. ZMQ drops a larger frame with the
// peer's connection, and no reply can be sent: so it is twice the largest
// payload any operation accepts (service_test checks), and a request between
// the two gets the operation's kTooLarge reply naming its limit. What it
// costs: a peer can make the server buffer this much per frame before any
// check (the fair queue's byte limits apply once it is read).
inline constexpr std::int64_t kMaxFrameBytes = 128ll << 20;

class RequestsInFlight;

// The fleet endpoint (--p2p-listen-url): a ROUTER only the fleet's members
// reach. It speaks CURVE as the server key pair derived from the fleet key,
// and a ZAP handler on the loop thread admits a client only when its public
// key is the members' (`is_member`), so every request on it comes from a
// connection that proved the fleet key; a client without the key never gets
// a connection (its refusal is counted). The endpoint has its own ZMQ
// context: its ZAP handler answers for it alone, never for the clients'
// endpoints, which speak ZMQ's NULL mechanism as the reference does.
//
// Against idle and flooding connections (issue 62, section 4): a connection
// that has not completed its handshake within `handshake_timeout_ms` is
// dropped (ZMQ_HANDSHAKE_IVL; 30 s by default in ZMQ), and one source
// address holds at most `max_connections_per_source` connections to it
// (SourceCap): the ones beyond are shut down as they are accepted, counted.
struct FleetEndpointConfig {
  std::string url;  // tcp://host:port
  std::string server_secret_z85;
  std::function<bool(std::span<const std::uint8_t>)> is_member;
  int handshake_timeout_ms = 3000;
  std::size_t max_connections_per_source = 64;
};

struct RouterConfig {
  std::vector<std::string> urls;  // tcp://host:port or ipc:///path; at least one
  // Endpoints bound for one model each (--model-url MODEL=URL): a request
  // over one names that model in its context (RequestContext::endpoint_model).
  struct ModelEndpoint {
    std::string model;
    std::string url;
  };
  std::vector<ModelEndpoint> model_urls;
  std::optional<FleetEndpointConfig> fleet;  // P2P on
  unsigned affinity_workers = 1;  // --max-gpu-workers
  unsigned cpu_workers = 1;       // --max-cpu-workers
  FairQueueLimits queue_limits;   // per pool, and per lane of the affinity pool
  int high_water_mark = 10000;    // ZMQ messages queued per peer and direction
  // Which local users may send requests over TCP, whatever address they
  // connect to (the kernel's socket diagnostics name the owner of a peer
  // socket on this host): the server's own user and these (--allow-uids),
  // or every local user when nullopt. Peers on other hosts reach the server
  // only where it listens beyond loopback; the fleet endpoint admits only
  // the fleet's key; an ipc endpoint is its socket file's mode (0600).
  std::optional<std::set<uid_t>> allowed_uids = std::set<uid_t>{};
  // The ZMQ context to use (tests share one to reach inproc:// endpoints);
  // nullptr: the loop makes its own.
  zmq::context_t* context = nullptr;
};

class RouterLoop {
 public:
  // Binds every URL (fails, naming the URL and any server holding it).
  static Result<std::unique_ptr<RouterLoop>> Create(const RouterConfig& config);
  ~RouterLoop();
  RouterLoop(const RouterLoop&) = delete;
  RouterLoop& operator=(const RouterLoop&) = delete;

  // Serves `handler` until Stop(); then drains the pools and sends their last replies.
  void Run(RequestHandler* handler);
  void Stop();
  // Stop(), and before the sockets close answer every request still queued
  // in them with `why` (an error the client decodes and may retry) instead
  // of dropping it: a server handing over to its successor. Only requests
  // that arrive after that last read are lost with the connection.
  void StopRefusing(Status why);
  // The bound endpoints (a tcp port 0 resolved to the real port).
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  TransportStats Stats() const;
  // SteadyClock time of the loop's last turn (it turns at least every second,
  // idle or not): its heartbeat for the health watchdog. 0 before Run().
  TimeMs last_heartbeat_ms() const { return heartbeat_ms_.load(std::memory_order_relaxed); }
  // SteadyClock time of the last connection an endpoint failed to accept
  // (out of descriptors, say); 0 if none has failed.
  TimeMs last_accept_failure_ms() const {
    return accept_failure_ms_.load(std::memory_order_relaxed);
  }

 private:
  struct Endpoint;
  struct Message;
  struct Outgoing;
  explicit RouterLoop(const RouterConfig& config);
  // Binds `url` on `context`; `fleet`: as the fleet endpoint (CURVE server);
  // `model`: as that model's endpoint (--model-url).
  Status Bind(const std::string& url, zmq::context_t& context,
              const FleetEndpointConfig* fleet = nullptr, std::string model = {});
  Status BindFleet(const FleetEndpointConfig& fleet);
  // Answers the fleet endpoint's pending ZAP requests (RFC 27): 200 for the
  // members' CURVE key, 400 for any other.
  void AnswerZap();
  void Receive(std::size_t socket_index);
  // Drains the socket's monitor: connections that closed are reported.
  void ReceiveMonitorEvents(std::size_t socket_index);
  void Dispatch(std::unique_ptr<Message> message);
  // A stream's control frame (empty operation frame): to the handler, no reply.
  // Whether `message` is exactly a stream's control frame (ack or cancel).
  static bool IsStreamControl(const Message& message);
  void Control(const Message& message);
  void Refuse(Message& message, const RequestRoute* route, const Status& status);
  void Complete(Outgoing reply) LMC_EXCLUDES(outbox_mu_);
  void DrainOutbox() LMC_EXCLUDES(outbox_mu_);
  void Send(Outgoing& reply);
  // Sends a handled request's reply; when its connection closed and this was
  // its last request in flight, the connection is released at the end of
  // the loop's turn (ReleaseAnswered), never from inside a handler callback.
  void Deliver(Outgoing& reply);
  void ReleaseAnswered();
  // A connection closed: the handler hears of it now, or after its last answer.
  void ConnectionGone(const std::string& connection);
  // Whether `message`, read from descriptor `fd`, comes from a user allowed
  // to send requests (RouterConfig::allowed_uids); decided once per connection.
  bool FromAllowedUser(const Message& message, int fd);

  const RouterConfig config_;
  RequestHandler* handler_ = nullptr;
  std::thread::id loop_thread_;
  std::unique_ptr<zmq::context_t> own_context_;
  zmq::context_t* context_;
  // The fleet endpoint's context and its ZAP handler (a REP socket), null
  // without P2P; declared before sockets_, so that they outlive the sockets.
  std::unique_ptr<zmq::context_t> fleet_context_;
  std::unique_ptr<zmq::socket_t> zap_;
  std::vector<std::unique_ptr<Endpoint>> sockets_;
  std::vector<std::string> endpoints_;
  WakeFd wake_;  // replies queued or stop requested
  std::unique_ptr<RequestsInFlight> in_flight_;  // the loop thread's
  std::vector<std::string> released_;  // closed and answered: OnDisconnect this turn
  std::unique_ptr<AffinityPool> affinity_pool_;
  std::unique_ptr<ThreadPool> cpu_pool_;
  std::atomic<bool> stop_{false};
  // Set by StopRefusing before stop_; read by the loop thread once stopped.
  std::optional<Status> final_refusal_;
  bool refusing_ = false;  // the loop thread's: Dispatch refuses everything
  // The loop thread's: per loopback TCP connection, whether its user is
  // allowed; and the users refused so far (each logged once).
  std::unordered_map<std::string, bool> allowed_connections_;
  // Each tcp connection's owner as the kernel named it at the accept.
  AcceptedOwners accepted_owners_;
  // The verdicts of the last kClosedVerdicts connections that closed, for
  // their messages read after the close (oldest first in closed_order_).
  static constexpr std::size_t kClosedVerdicts = 4096;
  std::unordered_map<std::string, bool> closed_verdicts_;
  std::deque<std::string> closed_order_;
  std::set<uid_t> refused_uids_;

  Mutex outbox_mu_;
  std::deque<Outgoing> outbox_ LMC_GUARDED_BY(outbox_mu_);

  TransportCounters counters_;
  std::atomic<TimeMs> heartbeat_ms_{0};
  std::atomic<TimeMs> accept_failure_ms_{0};
};

}  // namespace lmcache::transport
