#include "fleet/peer_rpc.h"

#include "common/logging.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <thread>
#include <variant>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/mailbox.h"
#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"
#include "fleet/whole_message_send.h"
#include "protocol/wire_codec.h"

namespace lmcache::fleet {

LMC_STATS_ROWS(PeerRpcStatRows, PeerRpcStats, LMC_PEER_RPC_STATS)

namespace {

constexpr int kIdleWaitMs = 100;   // the thread's longest sleep (deadlines are checked after it)
constexpr int kSendHighWater = 1000;  // requests queued to one peer before a call is refused

// The operation frame the reference's server decodes: the integer id of the
// frozen table, or the name of an operation sent by name. Only what a member
// calls a peer with.
Result<std::string> OperationFrame(Op op) {
  switch (op) {
    case Op::kP2pLookupAndLock:
    case Op::kP2pQueryLookupResults:
    case Op::kP2pUnlockObjects:
    case Op::kPing:
      return msgpk::Encoder().Int(static_cast<std::int64_t>(op)).Take();
    case Op::kServerInfo:
      return msgpk::Encoder().Str("server_info").Take();
    case Op::kP2pHello:
      return msgpk::Encoder().Str("p2p_hello").Take();
    case Op::kP2pEndTask:
      return msgpk::Encoder().Str("p2p_end_task").Take();
    case Op::kP2pUnlockTask:
      return msgpk::Encoder().Str("p2p_unlock_task").Take();
    case Op::kP2pChunkEvents:
      return msgpk::Encoder().Str("p2p_chunk_events").Take();
    case Op::kP2pChunkListing:
      return msgpk::Encoder().Str("p2p_chunk_listing").Take();
    default:
      return Status(ErrorCode::kNotSupported,
                    "operation " + std::to_string(static_cast<int>(op)) +
                        " is not one a peer is called with");
  }
}

}  // namespace

struct PeerRpc::Impl {
  struct Pending {
    PeerId peer = 0;
    std::string op_frame;
    TimeMs deadline_ms = 0;
    Done done;
  };
  struct ConnectCommand {
    PeerId peer;
    std::string url;
  };
  struct DisconnectCommand {
    PeerId peer;
  };
  struct CallCommand {
    PeerId peer;
    std::string op_frame;
    std::vector<std::string> payloads;
    TimeMs deadline_ms;
    Done done;
  };
  using Command = std::variant<ConnectCommand, DisconnectCommand, CallCommand>;

  CurveKeyPair client;
  std::string server_public_z85;
  ClosedObserver on_closed;
  const Clock* clock = nullptr;
  zmq::context_t context{1};
  // What other threads ask of the thread, and its wake-up. Closed when
  // EndAll takes the last commands: a call posted after (from a completion
  // that calls again) ends at once instead of never.
  Mailbox<Command> mailbox;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<PeerId> next_peer{1};

  // A peer's DEALER, and the PAIR its socket monitor reports to: a
  // DISCONNECTED there means no call sent before can be answered.
  struct PeerSocket {
    zmq::socket_t socket;
    zmq::socket_t monitor;
  };

  // The thread's own.
  std::map<PeerId, PeerSocket> sockets;
  std::map<PeerId, std::string> open_errors;  // why a peer has no socket
  std::map<std::uint64_t, Pending> pending;  // by request id
  std::uint64_t next_uid = 1;

  PeerRpcCounters counters;

  void Post(Command command) {
    std::optional<Command> refused = mailbox.Post(std::move(command));
    if (!refused) return;
    if (auto* call = std::get_if<CallCommand>(&*refused)) {
      call->done(Status(ErrorCode::kUnavailable, "the peer RPC has stopped"));
    }
  }

  void Run() {
    while (!stop.load(std::memory_order_acquire)) {
      RunCommands();
      Poll();
      ExpireCalls();
    }
    EndAll(Status(ErrorCode::kUnavailable, "the peer RPC stopped"));
  }

  void RunCommands() {
    for (Command& command : mailbox.TakeAll()) {
      if (auto* c = std::get_if<ConnectCommand>(&command)) {
        Open(*c);
      } else if (auto* d = std::get_if<DisconnectCommand>(&command)) {
        Close(d->peer);
      } else {
        Send(std::get<CallCommand>(command));
      }
    }
  }

  void Open(const ConnectCommand& command) {
    try {
      zmq::socket_t socket(context, zmq::socket_type::dealer);
      socket.set(zmq::sockopt::linger, 0);
      socket.set(zmq::sockopt::sndhwm, kSendHighWater);
      socket.set(zmq::sockopt::maxmsgsize, kMaxReplyBytes);
      socket.set(zmq::sockopt::curve_serverkey, server_public_z85);
      socket.set(zmq::sockopt::curve_publickey, client.public_z85);
      socket.set(zmq::sockopt::curve_secretkey, client.secret_z85);
      // The monitor first, so that no close of the connection goes unseen.
      const std::string monitor_url = "inproc://lmc-peer-rpc-" +
                                      std::to_string(reinterpret_cast<std::uintptr_t>(this)) + "-" +
                                      std::to_string(command.peer);
      if (zmq_socket_monitor(socket.handle(), monitor_url.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
        throw zmq::error_t();
      }
      zmq::socket_t monitor(context, zmq::socket_type::pair);
      monitor.set(zmq::sockopt::linger, 0);
      monitor.connect(monitor_url);
      socket.connect(command.url);
      sockets.emplace(command.peer, PeerSocket{std::move(socket), std::move(monitor)});
      counters.peers.fetch_add(1, std::memory_order_relaxed);
    } catch (const zmq::error_t& e) {
      // A URL ZMQ refuses, or the context's socket limit: the peer stays
      // unknown and its calls end unsent, with this cause.
      open_errors.insert_or_assign(command.peer, std::string(e.what()));
      static RateLimitedLog log(std::chrono::seconds(10));
      log.Warn("p2p: cannot open a connection to {}: {}", command.url, e.what());
    }
  }

  void Close(PeerId peer) {
    open_errors.erase(peer);
    if (auto it = sockets.find(peer); it != sockets.end()) {
      zmq_socket_monitor(it->second.socket.handle(), nullptr, 0);
      sockets.erase(it);
      counters.peers.fetch_sub(1, std::memory_order_relaxed);
    }
    EndWhere([peer](const Pending& p) { return p.peer == peer; },
             Status(ErrorCode::kUnavailable, "the peer was disconnected"));
  }

  void Send(CallCommand& call) {
    auto socket = sockets.find(call.peer);
    const std::uint64_t uid = next_uid++;
    const std::string uid_frame = msgpk::Encoder().Uint(uid).Take();
    SendOutcome outcome = SendOutcome::kQueueFull;
    if (socket != sockets.end()) {
      try {
        std::vector<zmq::const_buffer> frames{zmq::buffer(uid_frame), zmq::buffer(call.op_frame)};
        for (const std::string& p : call.payloads) frames.push_back(zmq::buffer(p));
        outcome = SendWholeMessage(socket->second.socket, frames);
      } catch (const zmq::error_t&) {
        outcome = SendOutcome::kQueueFull;
      }
    }
    if (outcome != SendOutcome::kSent) {
      counters.unsent.fetch_add(1, std::memory_order_relaxed);
      std::string why = outcome == SendOutcome::kDroppedMidMessage
                            ? "the connection to the peer ended while the call was sent"
                            : "the peer's send queue is full";
      if (socket == sockets.end()) {
        auto failed = open_errors.find(call.peer);
        why = failed == open_errors.end()
                  ? "no connection to that peer"
                  : "no connection to that peer: opening it failed: " + failed->second;
      }
      call.done(Status(ErrorCode::kUnavailable, why));
      return;
    }
    pending.emplace(uid, Pending{call.peer, std::move(call.op_frame), call.deadline_ms,
                                 std::move(call.done)});
  }

  void Poll() {
    std::vector<zmq::pollitem_t> items;
    std::vector<PeerId> ids;
    items.push_back({nullptr, mailbox.fd(), ZMQ_POLLIN, 0});
    for (auto& [id, peer] : sockets) {  // each peer's socket, then its monitor
      items.push_back({peer.socket.handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({peer.monitor.handle(), 0, ZMQ_POLLIN, 0});
      ids.push_back(id);
    }
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(kIdleWaitMs));
    } catch (const zmq::error_t&) {
      return;  // EINTR: the next turn polls again
    }
    if (items[0].revents & ZMQ_POLLIN) mailbox.Drain();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (items[1 + 2 * i].revents & ZMQ_POLLIN) Receive(ids[i]);
      if (items[2 + 2 * i].revents & ZMQ_POLLIN) Disconnected(ids[i]);
    }
  }

  // `peer`'s connection closed: the peer died, restarted, or refused our
  // key. A call sent before can never be answered (a new life knows nothing
  // of it), so each ends now instead of at its deadline, after the replies
  // that had arrived are taken. ZMQ reconnects in the background; later
  // calls go to whoever answers there next.
  void Disconnected(PeerId peer) {
    auto it = sockets.find(peer);
    if (it == sockets.end()) return;
    bool closed = false;
    while (true) {
      std::vector<zmq::message_t> event;
      try {
        if (!zmq::recv_multipart(it->second.monitor, std::back_inserter(event),
                                 zmq::recv_flags::dontwait)) {
          break;
        }
      } catch (const zmq::error_t&) {
        break;
      }
      closed = true;  // only DISCONNECTED is asked for
    }
    if (!closed) return;
    Receive(peer);
    EndWhere([peer](const Pending& p) { return p.peer == peer; },
             Status(ErrorCode::kUnavailable,
                    "the peer's connection closed (it died, restarted or refused our key) "
                    "before it answered"),
             &counters.closed_calls);
    if (on_closed) on_closed(peer);
  }

  // Takes every reply waiting on `peer`'s socket.
  void Receive(PeerId peer) {
    auto socket = sockets.find(peer);
    if (socket == sockets.end()) return;
    while (true) {
      std::vector<zmq::message_t> frames;
      try {
        if (!zmq::recv_multipart(socket->second.socket, std::back_inserter(frames),
                                 zmq::recv_flags::dontwait)) {
          return;
        }
      } catch (const zmq::error_t&) {
        return;
      }
      Deliver(peer, frames);
    }
  }

  // A reply: [uid, operation, value] or [uid, operation, value, error].
  void Deliver(PeerId peer, const std::vector<zmq::message_t>& frames) {
    auto call = pending.end();
    bool uid_read = false;
    if (frames.size() == 3 || frames.size() == 4) {
      msgpk::MsgpackCursor uid_cursor(frames[0].to_string_view());
      auto uid = uid_cursor.ReadUint("uid");
      uid_read = uid.ok() && uid_cursor.AtEnd();
      if (uid_read) call = pending.find(*uid);
    }
    if (call == pending.end()) {
      // A reply for no call in flight: ours once, ended since (its
      // deadline); or frames we cannot read as a reply at all.
      (uid_read ? counters.late_replies : counters.stray_replies)
          .fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (call->second.peer != peer || frames[1].to_string_view() != call->second.op_frame) {
      // Another peer's request id, or another operation's.
      counters.stray_replies.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Done done = std::move(call->second.done);
    pending.erase(call);
    counters.replies.fetch_add(1, std::memory_order_relaxed);
    if (frames.size() == 4) {
      done(protocol::DecodeErrorMap(frames[3].to_string_view()));
      return;
    }
    done(std::string(frames[2].to_string_view()));
  }

  void ExpireCalls() {
    const TimeMs now = clock->NowMs();
    EndWhere([now](const Pending& p) { return p.deadline_ms <= now; },
             Status(ErrorCode::kTimeout, "the peer did not answer by the call's deadline"),
             &counters.timeouts);
  }

  // Ends the calls `matches` picks with `why`; adds how many to `counted`
  // (if given) before any completion runs, so a caller woken by one sees
  // them counted.
  template <typename Predicate>
  void EndWhere(Predicate matches, const Status& why,
                std::atomic<std::uint64_t>* counted = nullptr) {
    std::vector<Done> ended;
    for (auto it = pending.begin(); it != pending.end();) {
      if (matches(it->second)) {
        ended.push_back(std::move(it->second.done));
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    if (counted != nullptr) counted->fetch_add(ended.size(), std::memory_order_relaxed);
    for (Done& done : ended) done(why);
  }

  void EndAll(const Status& why) {
    EndWhere([](const Pending&) { return true; }, why);
    for (Command& command : mailbox.Close()) {
      if (auto* call = std::get_if<CallCommand>(&command)) call->done(why);
    }
    for (auto& [id, peer] : sockets) zmq_socket_monitor(peer.socket.handle(), nullptr, 0);
    sockets.clear();
    counters.peers.store(0, std::memory_order_relaxed);
  }
};

Result<std::unique_ptr<PeerRpc>> PeerRpc::Start(const FleetKey& key, const Clock* clock,
                                                ClosedObserver on_closed, std::size_t max_peers) {
  auto impl = std::make_unique<Impl>();
  // Two sockets a peer (its DEALER, its monitor's PAIR), and room for the
  // monitors' inproc ends (ZMQ's default is 1,023 in all).
  impl->context.set(zmq::ctxopt::max_sockets, static_cast<int>(4 * max_peers + 64));
  impl->on_closed = std::move(on_closed);  // before the thread that reads it starts
  impl->client = key.client();
  impl->server_public_z85 = key.server().public_z85;
  impl->clock = clock;
  LMC_RETURN_IF_ERROR(impl->mailbox.Open());
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<PeerRpc>(new PeerRpc(std::move(impl)));
}

PeerRpc::PeerRpc(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PeerRpc::~PeerRpc() { Stop(); }

void PeerRpc::Stop() {
  if (!impl_->thread.joinable()) return;
  impl_->stop.store(true, std::memory_order_release);
  impl_->mailbox.Wake();
  impl_->thread.join();
}

PeerId PeerRpc::Connect(const std::string& url) {
  const PeerId peer = impl_->next_peer.fetch_add(1, std::memory_order_relaxed);
  impl_->Post(Impl::ConnectCommand{peer, url});
  return peer;
}

void PeerRpc::Disconnect(PeerId peer) { impl_->Post(Impl::DisconnectCommand{peer}); }

void PeerRpc::Call(PeerId peer, Op op, std::vector<std::string> payloads, TimeMs deadline_ms,
                   Done done) {
  impl_->counters.calls.fetch_add(1, std::memory_order_relaxed);
  auto op_frame = OperationFrame(op);
  if (!op_frame.ok()) {
    impl_->counters.unsent.fetch_add(1, std::memory_order_relaxed);
    done(op_frame.status());
    return;
  }
  impl_->Post(Impl::CallCommand{peer, *std::move(op_frame), std::move(payloads), deadline_ms,
                                std::move(done)});
}

PeerRpcStats PeerRpc::Stats() const {
  PeerRpcStats s;
  impl_->counters.CopyTo(&s);
  return s;
}

}  // namespace lmcache::fleet
