#include "transport/router_loop.h"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <array>
#include <functional>
#include <unordered_map>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/logging.h"
#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"
#include "transport/connection_fds.h"
#include "transport/source_cap.h"
#include "transport/tcp_peer_owner.h"
#include "transport/endpoint_guard.h"
#include "transport/requests_in_flight.h"

namespace lmcache::transport {

// One bound ROUTER socket, its monitor, and the client connections it serves.
struct RouterLoop::Endpoint {
  std::unique_ptr<IpcEndpointLock> ipc_lock;  // ipc only; outlives the socket
  std::unique_ptr<zmq::socket_t> socket;
  std::unique_ptr<zmq::socket_t> monitor;  // PAIR receiving the socket's events
  Transport transport = Transport::kTcp;
  bool fleet = false;  // the fleet endpoint: every connection proved the fleet key
  std::string model;   // a --model-url endpoint's model; empty otherwise
  std::unique_ptr<SourceCap> source_cap;  // the fleet endpoint's: connections per source
  // The connection seen on each file descriptor (a closed descriptor's
  // connection is gone).
  ConnectionFds fds;

  // ZMQ's I/O thread sends a connection's events as it sees them, with a
  // blocking send: one sent after `monitor` closed blocks that thread (every
  // socket of the context stalls) until the context ends, and is then leaked.
  // So the events stop before anything closes.
  ~Endpoint() { Close(); }
  // Idempotent. `linger_ms`: how long queued replies may still take to go out.
  void Close(int linger_ms = 0) {
    if (socket && socket->handle() != nullptr) {
      if (monitor) (void)zmq_socket_monitor(socket->handle(), nullptr, 0);
      if (linger_ms > 0) socket->set(zmq::sockopt::linger, linger_ms);
      socket->close();
    }
    if (monitor) monitor->close();
  }
};

// One request's frames as received (no copy), owned by whichever thread handles it.
struct RouterLoop::Message {
  std::size_t socket_index = 0;
  std::vector<zmq::message_t> frames;  // identity, uid, operation, payload...
  std::vector<std::string_view> payloads;
  std::string connection;  // socket index + routing id
  RequestContext context;
  std::size_t payload_bytes = 0;
  bool late = false;  // read after its connection's close was reported
  bool other_user = false;  // over loopback TCP from a user not allowed: refused
};

// A reply on its way back to the loop thread.
struct RouterLoop::Outgoing {
  std::size_t socket_index = 0;
  zmq::message_t identity;
  zmq::message_t uid;
  zmq::message_t operation;
  ReplyFrames reply;
  std::string connection;  // set when the request was counted in flight
};

namespace {

constexpr int kReceiveBatch = 256;  // messages per socket per poll round
// How long a handing-over server's sockets may take to deliver their last replies.
constexpr int kHandoverLingerMs = 2000;
constexpr auto kProbeTimeout = std::chrono::milliseconds(2000);

// The pid of an lmcache-server answering server_info at `url`, if one answers.
std::optional<std::int64_t> ProbeServerPid(zmq::context_t& context, const std::string& url) {
  try {
    zmq::socket_t probe(context, zmq::socket_type::dealer);
    probe.set(zmq::sockopt::linger, 0);
    probe.connect(url);
    const std::string uid = msgpk::Encoder().Uint(0).Take();
    const std::string op = msgpk::Encoder().Str("server_info").Take();
    probe.send(zmq::buffer(uid), zmq::send_flags::sndmore);
    probe.send(zmq::buffer(op), zmq::send_flags::none);
    zmq::pollitem_t item{probe.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, kProbeTimeout) == 0) return std::nullopt;
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(probe, std::back_inserter(frames));
    if (frames.size() < 3) return std::nullopt;
    msgpk::MsgpackCursor in(frames[2].to_string_view());
    std::optional<std::int64_t> pid;
    const Status read = in.ReadFields("server_info", [&](std::string_view name) -> Result<bool> {
      if (name != "pid") return false;
      LMC_ASSIGN_OR_RETURN(pid, in.ReadInt("pid"));
      return true;
    });
    return read.ok() ? pid : std::nullopt;
  } catch (const zmq::error_t&) {
    return std::nullopt;
  }
}

}  // namespace

RouterLoop::RouterLoop(const RouterConfig& config)
    : config_(config),
      own_context_(config.context == nullptr ? std::make_unique<zmq::context_t>(1) : nullptr),
      context_(config.context != nullptr ? config.context : own_context_.get()),
      in_flight_(std::make_unique<RequestsInFlight>()) {}

RouterLoop::~RouterLoop() {
  Stop();
  if (affinity_pool_) affinity_pool_->Stop();
  if (cpu_pool_) cpu_pool_->Stop();
  // Then the endpoints, and their ipc locks, which remove the socket files.
  sockets_.clear();
}

Result<std::unique_ptr<RouterLoop>> RouterLoop::Create(const RouterConfig& config) {
  if (config.urls.empty()) return InvalidConfig("no endpoint to bind: give --url or --host/--port");
  std::unique_ptr<RouterLoop> loop(new RouterLoop(config));
  LMC_ASSIGN_OR_RETURN(loop->wake_, WakeFd::Create());
  for (const std::string& url : config.urls) LMC_RETURN_IF_ERROR(loop->Bind(url, *loop->context_));
  for (const RouterConfig::ModelEndpoint& endpoint : config.model_urls) {
    LMC_RETURN_IF_ERROR(loop->Bind(endpoint.url, *loop->context_, nullptr, endpoint.model));
  }
  if (config.fleet) LMC_RETURN_IF_ERROR(loop->BindFleet(*config.fleet));
  loop->affinity_pool_ =
      std::make_unique<AffinityPool>("transfer", config.affinity_workers, config.queue_limits);
  loop->cpu_pool_ = std::make_unique<ThreadPool>("cpu", config.cpu_workers, config.queue_limits);
  return loop;
}

Status RouterLoop::BindFleet(const FleetEndpointConfig& fleet) {
  if (!fleet.url.starts_with("tcp://")) {
    return InvalidConfig("the fleet endpoint must be tcp://HOST:PORT, not " + fleet.url);
  }
  if (fleet.server_secret_z85.size() != 40 || !fleet.is_member) {
    return InvalidConfig("the fleet endpoint needs the fleet key's server secret and member check");
  }
  fleet_context_ = std::make_unique<zmq::context_t>(1);
  // The ZAP handler must be bound before the CURVE socket: a CURVE server
  // whose context has no handler admits every client key.
  zap_ = std::make_unique<zmq::socket_t>(*fleet_context_, zmq::socket_type::rep);
  try {
    zap_->set(zmq::sockopt::linger, 0);
    zap_->bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return Status(ErrorCode::kIoError, std::string("cannot bind the fleet's ZAP handler: ") + e.what());
  }
  return Bind(fleet.url, *fleet_context_, &fleet);
}

void RouterLoop::AnswerZap() {
  while (true) {
    std::vector<zmq::message_t> request;
    try {
      if (!zmq::recv_multipart(*zap_, std::back_inserter(request), zmq::recv_flags::dontwait)) {
        return;
      }
    } catch (const zmq::error_t&) {
      return;
    }
    // version, request id, domain, address, identity, mechanism, credentials...
    const bool member = request.size() == 7 && request[0].to_string_view() == "1.0" &&
                        request[5].to_string_view() == "CURVE" &&
                        config_.fleet->is_member(std::span<const std::uint8_t>(
                            static_cast<const std::uint8_t*>(request[6].data()),
                            request[6].size()));
    if (member) {
      counters_.fleet_admitted.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters_.fleet_refused.fetch_add(1, std::memory_order_relaxed);
      static RateLimitedLog log(std::chrono::seconds(10));
      log.Warn("refused a connection to the fleet endpoint from {}: it did not prove the fleet "
               "key (--p2p-auth-key-file)",
               request.size() > 3 ? request[3].to_string() : std::string("?"));
    }
    const std::string request_id = request.size() > 1 ? request[1].to_string() : std::string();
    const std::array<std::string, 6> reply = {"1.0", request_id, member ? "200" : "400",
                                              member ? "OK" : "not a member of this fleet",
                                              member ? "fleet-member" : "", ""};
    try {
      for (std::size_t i = 0; i < reply.size(); ++i) {
        zap_->send(zmq::buffer(reply[i]),
                   i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const zmq::error_t& e) {
      spdlog::error("cannot answer the fleet's ZAP request: {}", e.what());
      return;
    }
  }
}

Status RouterLoop::Bind(const std::string& url, zmq::context_t& context,
                        const FleetEndpointConfig* fleet, std::string model) {
  auto endpoint = std::make_unique<Endpoint>();
  endpoint->fleet = fleet != nullptr;
  endpoint->model = std::move(model);
  const bool ipc = url.starts_with("ipc://");
  endpoint->transport = ipc                            ? Transport::kIpc
                        : url.starts_with("inproc://") ? Transport::kInproc
                                                       : Transport::kTcp;
  if (ipc) {
    LMC_ASSIGN_OR_RETURN(endpoint->ipc_lock, IpcEndpointLock::Acquire(url.substr(6)));
  }
  endpoint->socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
  zmq::socket_t& socket = *endpoint->socket;
  try {
    if (fleet != nullptr) {
      socket.set(zmq::sockopt::curve_server, 1);
      socket.set(zmq::sockopt::curve_secretkey, fleet->server_secret_z85);
      socket.set(zmq::sockopt::zap_domain, "lmcache-fleet");
      // A connection that does not prove the key soon holds nothing long.
      socket.set(zmq::sockopt::handshake_ivl, fleet->handshake_timeout_ms);
    }
    socket.set(zmq::sockopt::router_mandatory, 1);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::maxmsgsize, kMaxFrameBytes);
    socket.set(zmq::sockopt::sndhwm, config_.high_water_mark);
    socket.set(zmq::sockopt::rcvhwm, config_.high_water_mark);
    socket.bind(url);
  } catch (const zmq::error_t& e) {
    if (e.num() == EADDRINUSE && fleet == nullptr) {
      if (const auto pid = ProbeServerPid(context, url)) {
        return Status(ErrorCode::kAlreadyExists, "another lmcache-server (pid " +
                                                     std::to_string(*pid) + ") already serves " +
                                                     url + "; stop it first or choose another port");
      }
    }
    return Status(ErrorCode::kIoError, "cannot bind " + url + ": " + e.what());
  }
  // Connection lifecycle events, so the loop learns when a client goes away.
  // Named by a process-wide count, not by address: a loop made where a
  // destroyed one lived must not reach the old monitor, which ZMQ may still be
  // closing.
  static std::atomic<std::uint64_t> monitors{0};
  const std::string monitor_url =
      "inproc://lmc-monitor-" + std::to_string(monitors.fetch_add(1, std::memory_order_relaxed));
  if (zmq_socket_monitor(socket.handle(), monitor_url.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_ACCEPT_FAILED | ZMQ_EVENT_DISCONNECTED) !=
      0) {
    return Status(ErrorCode::kIoError, "cannot monitor " + url + ": " + zmq_strerror(zmq_errno()));
  }
  endpoint->monitor = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pair);
  // No high-water mark: at one, ZMQ's I/O thread would block on the next event
  // (see ~Endpoint). The loop drains the events every turn.
  endpoint->monitor->set(zmq::sockopt::rcvhwm, 0);
  endpoint->monitor->connect(monitor_url);
  std::string bound = socket.get(zmq::sockopt::last_endpoint);
  if (fleet != nullptr) {
    // The bound port (a port 0 resolved): tcp://HOST:PORT.
    const auto port = static_cast<std::uint16_t>(std::stoi(bound.substr(bound.rfind(':') + 1)));
    endpoint->source_cap = std::make_unique<SourceCap>(fleet->max_connections_per_source, port);
  }
  if (ipc) {
    // Only the server's user may connect: the socket grants access to the pool.
    const std::string path = bound.substr(6);
    if (::chmod(path.c_str(), 0600) != 0) {
      return Status(ErrorCode::kIoError, "chmod 0600 " + path + ": " + std::strerror(errno));
    }
    endpoint->ipc_lock->RecordBound();
  }
  endpoints_.push_back(std::move(bound));
  sockets_.push_back(std::move(endpoint));
  return Status::Ok();
}

void RouterLoop::Stop() {
  stop_.store(true);
  wake_.Wake();
}

void RouterLoop::StopRefusing(Status why) {
  final_refusal_ = std::move(why);  // published to the loop thread by stop_'s store
  Stop();
}

void RouterLoop::Run(RequestHandler* handler) {
  handler_ = handler;
  loop_thread_ = std::this_thread::get_id();
  // Sockets first, then their monitors, then the eventfd.
  std::vector<zmq::pollitem_t> items;
  for (auto& endpoint : sockets_) items.push_back({endpoint->socket->handle(), 0, ZMQ_POLLIN, 0});
  for (auto& endpoint : sockets_) items.push_back({endpoint->monitor->handle(), 0, ZMQ_POLLIN, 0});
  if (zap_) items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({nullptr, wake_.fd(), ZMQ_POLLIN, 0});
  const std::size_t n = sockets_.size();
  while (!stop_.load()) {
    heartbeat_ms_.store(SteadyClock::Instance().NowMs(), std::memory_order_relaxed);
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(1000));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      spdlog::error("zmq poll failed: {}", e.what());
      continue;
    }
    if (items.back().revents & ZMQ_POLLIN) wake_.Drain();
    if (zap_) AnswerZap();
    // Closed connections first: a descriptor reused by a new connection is
    // then mapped afresh by the messages that follow.
    for (std::size_t i = 0; i < n; ++i) ReceiveMonitorEvents(i);
    for (std::size_t i = 0; i < n; ++i) {
      if (items[i].revents & ZMQ_POLLIN) Receive(i);
    }
    DrainOutbox();
    ReleaseAnswered();
  }
  // Finish what the pools hold, then send their replies.
  affinity_pool_->Stop();
  cpu_pool_->Stop();
  DrainOutbox();
  ReleaseAnswered();
  if (final_refusal_) {
    refusing_ = true;
    std::uint64_t before = 0;
    do {  // until a pass reads nothing
      before = counters_.received.load(std::memory_order_relaxed);
      for (std::size_t i = 0; i < n; ++i) Receive(i);
    } while (counters_.received.load(std::memory_order_relaxed) != before);
    DrainOutbox();
    // Closed now, not when the loop is destroyed: a request that arrives
    // after the last read is lost with the connection, so the window is kept
    // to this instant (a client's unsent requests wait in its own queue for
    // the successor). The replies queued above still go out: a linger.
    for (auto& endpoint : sockets_) endpoint->Close(kHandoverLingerMs);
  }
}

void RouterLoop::Receive(std::size_t socket_index) {
  Endpoint& endpoint = *sockets_[socket_index];
  for (int n = 0; n < kReceiveBatch; ++n) {
    auto message = std::make_unique<Message>();
    message->socket_index = socket_index;
    try {
      zmq::message_t part;
      if (!endpoint.socket->recv(part, zmq::recv_flags::dontwait)) return;  // nothing more
      bool more = part.more();
      message->frames.push_back(std::move(part));
      while (more) {
        zmq::message_t next;
        (void)endpoint.socket->recv(next, zmq::recv_flags::none);
        more = next.more();
        message->frames.push_back(std::move(next));
      }
    } catch (const zmq::error_t& e) {
      static RateLimitedLog log(std::chrono::seconds(10));
      log.Warn("receive failed: {}", e.what());
      return;
    }
    counters_.received.fetch_add(1, std::memory_order_relaxed);
    // The socket's index and the peer's routing id name one client connection.
    message->connection.push_back(static_cast<char>(socket_index));
    message->connection.append(message->frames[0].to_string_view());
    if (message->frames.size() > 1) {
      // The descriptor a frame came in on (ZMQ_SRCFD). Not the routing id frame:
      // ROUTER makes that one itself, and after a poll it carries no descriptor.
      const int fd = zmq_msg_get(message->frames[1].handle(), ZMQ_SRCFD);
      if (fd >= 0 && endpoint.fds.IsLate(fd, message->connection)) {
        message->late = true;
      } else if (fd >= 0) {
        // A new connection on a reused descriptor: the one before it closed.
        if (auto gone = endpoint.fds.Seen(fd, message->connection)) ConnectionGone(*gone);
      }
    }
    message->context.connection = message->connection;
    if (message->frames.size() > 1) message->context.uid = message->frames[1].to_string_view();
    message->context.connection_closed = message->late;
    message->context.transport = endpoint.transport;
    message->context.fleet_member = endpoint.fleet;
    message->context.endpoint_model = endpoint.model;
    message->context.local_peer = endpoint.transport != Transport::kTcp;
    if (endpoint.transport == Transport::kTcp && message->frames.size() > 1) {
      // Peer-Address is metadata of every frame received over tcp.
      const char* peer = zmq_msg_gets(message->frames[1].handle(), "Peer-Address");
      message->context.local_peer = peer != nullptr && IsLoopbackAddress(peer);
      if (!endpoint.fleet) {
        message->other_user =
            !FromAllowedUser(*message, zmq_msg_get(message->frames[1].handle(), ZMQ_SRCFD));
      }
    }
    Dispatch(std::move(message));
  }
}

void RouterLoop::ReceiveMonitorEvents(std::size_t socket_index) {
  Endpoint& endpoint = *sockets_[socket_index];
  while (true) {
    std::vector<zmq::message_t> event;
    try {
      if (!zmq::recv_multipart(*endpoint.monitor, std::back_inserter(event),
                               zmq::recv_flags::dontwait)) {
        return;
      }
    } catch (const zmq::error_t&) {
      return;
    }
    // Frame 0: a 16-bit event id and a 32-bit value (the descriptor), native order.
    if (event.empty() || event[0].size() < 6) continue;
    std::uint16_t id = 0;
    std::uint32_t fd = 0;
    std::memcpy(&id, event[0].data(), sizeof(id));
    std::memcpy(&fd, static_cast<const char*>(event[0].data()) + 2, sizeof(fd));
    if (id == ZMQ_EVENT_ACCEPTED) {
      counters_.connections.fetch_add(1, std::memory_order_relaxed);
      endpoint.fds.Accepted(static_cast<int>(fd));
      if (config_.allowed_uids && endpoint.transport == Transport::kTcp && !endpoint.fleet) {
        // Its owner is told now, while the client's socket surely exists.
        accepted_owners_.Accepted(static_cast<int>(fd));
      }
      if (endpoint.source_cap && !endpoint.source_cap->Accepted(static_cast<int>(fd))) {
        // Past its source's cap: ZMQ sees the shut socket fail and closes it.
        ::shutdown(static_cast<int>(fd), SHUT_RDWR);
        counters_.capped_connections.fetch_add(1, std::memory_order_relaxed);
      }
      continue;
    }
    if (id == ZMQ_EVENT_ACCEPT_FAILED) {
      // The value is the errno (EMFILE: out of descriptors).
      counters_.accept_failures.fetch_add(1, std::memory_order_relaxed);
      accept_failure_ms_.store(SteadyClock::Instance().NowMs(), std::memory_order_relaxed);
      static RateLimitedLog log(std::chrono::seconds(10));
      log.Warn("an endpoint could not accept a connection: {} (raise the descriptor limit, "
               "ulimit -n, or find who holds so many connections)",
               std::strerror(static_cast<int>(fd)));
      continue;
    }
    if (id != ZMQ_EVENT_DISCONNECTED) continue;
    if (endpoint.source_cap) endpoint.source_cap->Closed(static_cast<int>(fd));
    if (endpoint.transport == Transport::kTcp && !endpoint.fleet) {
      accepted_owners_.Closed(static_cast<int>(fd));
    }
    counters_.connections.fetch_sub(1, std::memory_order_relaxed);
    counters_.disconnects.fetch_add(1, std::memory_order_relaxed);
    if (auto gone = endpoint.fds.Closed(static_cast<int>(fd))) ConnectionGone(*gone);
  }
}

bool RouterLoop::FromAllowedUser(const Message& message, int fd) {
  if (!config_.allowed_uids) return true;
  if (auto known = allowed_connections_.find(message.connection);
      known != allowed_connections_.end()) {
    return known->second;
  }
  // A message read after its connection closed (its last release, say) is
  // judged as its connection was; one whose connection closed before any
  // message was judged has no socket left to ask about: refused, as nothing
  // can be proved of it (its reply goes nowhere anyway).
  if (auto closed = closed_verdicts_.find(message.connection); closed != closed_verdicts_.end()) {
    return closed->second;
  }
  if (message.late || fd < 0) return false;
  // Any address of this host, not only loopback: a local user reaching an
  // endpoint bound beyond loopback through the host's own address is still
  // a local user. A peer the kernel knows no local socket of is on another
  // host (or in another network namespace): admitted where the operator
  // bound the endpoint beyond loopback.
  // As the kernel named it when the connection was accepted, or now.
  std::optional<Result<uid_t>> at_accept = accepted_owners_.Take(fd);
  Result<uid_t> owner = at_accept ? *std::move(at_accept) : TcpPeerOwner(fd);
  if (!owner.ok() && owner.status().code() == ErrorCode::kNotFound &&
      !message.context.local_peer) {
    allowed_connections_.emplace(message.connection, true);
    return true;
  }
  const bool allowed = owner.ok() && (*owner == ::geteuid() || config_.allowed_uids->contains(*owner));
  allowed_connections_.emplace(message.connection, allowed);
  if (!allowed && owner.ok() && refused_uids_.insert(*owner).second) {
    spdlog::warn("refusing requests over TCP from uid {} of this host (this server runs as uid "
                 "{}): another local user could learn which prompts are cached; give "
                 "--allow-uids {} to admit it (logged once per uid)",
                 *owner, ::geteuid(), *owner);
  } else if (!allowed) {
    // Any local process can make these (connect, send, reset): rate-limited.
    static RateLimitedLog unknown_owner(std::chrono::seconds(10));
    unknown_owner.Warn("refusing a TCP connection of this host whose owner cannot be told ({}); "
                       "give --allow-uids all to admit every local user",
                       owner.status().ToString());
  }
  return allowed;
}

void RouterLoop::ConnectionGone(const std::string& connection) {
  if (auto verdict = allowed_connections_.find(connection); verdict != allowed_connections_.end()) {
    // Kept a while for its messages still queued in the socket (late).
    closed_verdicts_.emplace(connection, verdict->second);
    closed_order_.push_back(connection);
    if (closed_order_.size() > kClosedVerdicts) {
      closed_verdicts_.erase(closed_order_.front());
      closed_order_.pop_front();
    }
    allowed_connections_.erase(verdict);
  }
  if (in_flight_->Closed(connection)) {
    handler_->OnDisconnect(connection);
    return;
  }
  // Requests of it still run: those parked are answered now, so that the
  // release does not wait for their deadlines.
  handler_->OnClosing(connection);
}

void RouterLoop::Deliver(Outgoing& reply) {
  Send(reply);
  if (reply.connection.empty()) return;  // a stream's item: its request is still open
  // This may run inside one of the handler's own callbacks (an inline
  // reply, or a parked request answered by OnClosing), perhaps under one of
  // its locks: the release waits for the end of the loop's turn.
  if (in_flight_->Answered(reply.connection)) released_.push_back(std::move(reply.connection));
}

void RouterLoop::ReleaseAnswered() {
  std::vector<std::string> released;
  released.swap(released_);
  for (const std::string& connection : released) handler_->OnDisconnect(connection);
}

void RouterLoop::Refuse(Message& message, const RequestRoute* route, const Status& status) {
  counters_.refused.fetch_add(1, std::memory_order_relaxed);
  if (message.frames.size() < 2) return;  // no uid to answer to: a peer that is no DEALER
  Outgoing reply{message.socket_index, std::move(message.frames[0]), std::move(message.frames[1]),
                 {}, handler_->Refuse(route, status), /*connection=*/{}};  // never ran: not counted
  // Echo the operation frame when there was one; nil otherwise.
  if (message.frames.size() > 2) {
    reply.operation = std::move(message.frames[2]);
  } else {
    const std::string nil = msgpk::Encoder().Nil().Take();
    reply.operation = zmq::message_t(nil.data(), nil.size());
  }
  spdlog::debug("refused a request: {}", status.ToString());
  Send(reply);
}

bool RouterLoop::IsStreamControl(const Message& message) {
  // [identity, uid, b"", signal]: the reference's MessagingStream control frame.
  if (message.frames.size() != 4 || message.frames[2].size() != 0) return false;
  const std::string_view signal = message.frames[3].to_string_view();
  return signal == "ack" || signal == "cancel";
}

void RouterLoop::Control(const Message& message) {
  counters_.stream_controls.fetch_add(1, std::memory_order_relaxed);
  if (message.late) return;  // its streams ended with the connection
  const std::string_view signal = message.frames[3].to_string_view();
  handler_->OnStreamControl(message.connection, message.frames[1].to_string_view(),
                            signal == "ack" ? StreamSignal::kAck : StreamSignal::kCancel);
}

void RouterLoop::Dispatch(std::unique_ptr<Message> message) {
  std::vector<zmq::message_t>& frames = message->frames;
  if (IsStreamControl(*message)) {
    Control(*message);  // no reply, ever
    return;
  }
  if (frames.size() >= 3 && frames[2].size() == 0) {
    // Anything else with an empty operation frame is a malformed request,
    // answered like one: its client would otherwise wait out its timeout.
    counters_.bad_controls.fetch_add(1, std::memory_order_relaxed);
    Refuse(*message, nullptr,
           Status(ErrorCode::kMalformedRequest,
                  "an empty operation frame is only a stream's control frame [uid, b\"\", "
                  "b\"ack\" | b\"cancel\"]; got " +
                      std::to_string(frames.size() - 1) + " frame(s)"));
    return;
  }
  if (frames.size() < 3) {
    Refuse(*message, nullptr,
           Status(ErrorCode::kMalformedRequest,
                  "a request needs at least a uid frame and an operation frame, got " +
                      std::to_string(frames.size() == 0 ? 0 : frames.size() - 1) + " frame(s)"));
    return;
  }
  Result<RequestRoute> route = handler_->Route(frames[2].to_string_view());
  if (!route.ok()) {
    Refuse(*message, nullptr, route.status());
    return;
  }
  if (refusing_) {
    Refuse(*message, &*route, *final_refusal_);
    return;
  }
  if (message->other_user) {
    counters_.refused_users.fetch_add(1, std::memory_order_relaxed);
    Refuse(*message, &*route,
           Status(ErrorCode::kPermissionDenied,
                  "this server admits loopback TCP requests only from its own user (and "
                  "--allow-uids): connect as that user, over its ipc:// endpoint, or ask its "
                  "operator to allow your uid"));
    return;
  }
  for (std::size_t i = 3; i < frames.size(); ++i) {
    message->payloads.push_back(frames[i].to_string_view());
    message->payload_bytes += frames[i].size();
  }
  // Bound the work a request can cause before anything decodes it.
  if (message->payload_bytes > route->max_request_bytes) {
    Refuse(*message, &*route,
           Status(ErrorCode::kTooLarge, "the request's payload of " +
                                            std::to_string(message->payload_bytes) +
                                            " bytes exceeds this operation's limit of " +
                                            std::to_string(route->max_request_bytes)));
    return;
  }
  const RequestRoute routed = *route;
  auto run = [this, routed](std::shared_ptr<Message> request) {
    Message& m = *request;
    handler_->Handle(routed, m.context, m.payloads, [this, request](ReplyFrames reply) {
      Outgoing out;
      out.socket_index = request->socket_index;
      if (reply.kind == ReplyKind::kStreamItem) {
        // The request stays open: its frames are copied, and it is not answered.
        out.identity.copy(request->frames[0]);
        out.uid.copy(request->frames[1]);
        out.operation.copy(request->frames[2]);
      } else {
        out.identity = std::move(request->frames[0]);
        out.uid = std::move(request->frames[1]);
        out.operation = std::move(request->frames[2]);
        out.connection = request->connection;
      }
      out.reply = std::move(reply);
      if (std::this_thread::get_id() == loop_thread_) {
        Deliver(out);  // an inline operation: no hop through the outbox
      } else {
        Complete(std::move(out));
      }
    });
  };
  std::shared_ptr<Message> shared(std::move(message));
  // Counted before it can be answered: a pool's answers are delivered on this
  // thread, after Dispatch returns.
  if (routed.pool == Pool::kInline) {
    in_flight_->Started(shared->connection, shared->late);
    run(shared);
    return;
  }
  const std::uint64_t client = std::hash<std::string>{}(shared->connection);
  const std::size_t bytes = shared->payload_bytes;
  auto task = [run, shared] { run(shared); };
  const FairQueue::Admission admission =
      routed.pool == Pool::kAffinity ? affinity_pool_->Submit(client, bytes, std::move(task))
                                     : cpu_pool_->Submit(client, bytes, std::move(task));
  if (admission == FairQueue::Admission::kQueued) {
    in_flight_->Started(shared->connection, shared->late);
  } else {
    counters_.overloaded.fetch_add(1, std::memory_order_relaxed);
    const char* why = admission == FairQueue::Admission::kClientFull
                          ? "this client has too many requests queued; read replies before "
                            "sending more"
                          : "server overloaded: request queue full; retry later";
    Refuse(*shared, &routed, Status(ErrorCode::kUnavailable, why));
  }
}

void RouterLoop::Complete(Outgoing reply) {
  {
    MutexLock lock(&outbox_mu_);
    outbox_.push_back(std::move(reply));
  }
  wake_.Wake();
}

void RouterLoop::DrainOutbox() {
  std::deque<Outgoing> ready;
  {
    MutexLock lock(&outbox_mu_);
    ready.swap(outbox_);
  }
  for (Outgoing& reply : ready) Deliver(reply);
}

void RouterLoop::Send(Outgoing& reply) {
  static RateLimitedLog dropped_log(std::chrono::seconds(10));
  zmq::socket_t& socket = *sockets_[reply.socket_index]->socket;
  std::vector<zmq::message_t> parts;
  parts.push_back(std::move(reply.identity));
  parts.push_back(std::move(reply.uid));
  parts.push_back(std::move(reply.operation));
  if (reply.reply.kind != ReplyKind::kStreamEnd) {  // the end marker has no value frame
    parts.emplace_back(reply.reply.value.data(), reply.reply.value.size());
  }
  if (reply.reply.error) parts.emplace_back(reply.reply.error->data(), reply.reply.error->size());
  try {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const bool last = i + 1 == parts.size();
      auto sent = socket.send(parts[i], (last ? zmq::send_flags::none : zmq::send_flags::sndmore) |
                                            zmq::send_flags::dontwait);
      if (!sent) {  // the peer's queue is full: drop rather than block every client
        counters_.undeliverable.fetch_add(1, std::memory_order_relaxed);
        dropped_log.Warn("dropped a reply: the client's queue is full (it is not reading replies)");
        return;
      }
    }
    if (reply.reply.kind == ReplyKind::kStreamItem) {
      counters_.stream_items.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters_.replied.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH (ROUTER_MANDATORY): the client disconnected before its reply.
    counters_.undeliverable.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("reply undeliverable: {}", e.what());
  }
}

TransportStats RouterLoop::Stats() const {
  TransportStats stats;
  counters_.CopyTo(&stats);
  if (affinity_pool_ && cpu_pool_) {
    const FairQueueStats affinity = affinity_pool_->Stats();
    const FairQueueStats cpu = cpu_pool_->Stats();
    stats.queued_requests = affinity.tasks + cpu.tasks;
    stats.queued_bytes = affinity.bytes + cpu.bytes;
  }
  return stats;
}

LMC_STATS_ROWS(TransportCountedStatRows, TransportStats, LMC_TRANSPORT_COUNTED_STATS)

LMC_STATS_ROWS(TransportQueueStatRows, TransportStats, LMC_TRANSPORT_QUEUE_STATS)

}  // namespace lmcache::transport
