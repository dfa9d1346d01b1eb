#include "server/router_loop.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <zmq.hpp>

#include "server/codec.h"

namespace lmcache::server {

// One request's frames, owned by whichever thread handles it.
struct RouterLoop::Message {
  std::size_t socket_index = 0;
  std::vector<std::string> frames;  // identity, uid, operation, payload...
};

// A reply on its way back to the loop thread.
struct RouterLoop::Outgoing {
  std::size_t socket_index = 0;
  std::vector<std::string> frames;  // identity, uid, operation, value [, error]
};

namespace {

constexpr std::int64_t kMaxMessageBytes = 256 << 20;  // ZMQ drops peers that send more in one frame
constexpr int kHighWaterMark = 100'000;               // messages queued per peer
constexpr int kReceiveBatch = 256;                    // messages per socket per poll round

}  // namespace

RouterLoop::RouterLoop(Service* service, const RouterConfig& config)
    : service_(service), config_(config), context_(std::make_unique<zmq::context_t>(1)) {}

RouterLoop::~RouterLoop() {
  Stop();
  if (affinity_pool_) affinity_pool_->Stop();
  if (cpu_pool_) cpu_pool_->Stop();
  for (auto& socket : sockets_) socket->close();
  for (const std::string& path : ipc_paths_) ::unlink(path.c_str());
}

Result<std::unique_ptr<RouterLoop>> RouterLoop::Create(Service* service,
                                                       const RouterConfig& config) {
  if (config.urls.empty()) return InvalidConfig("no endpoint to bind: give --url or --host/--port");
  std::unique_ptr<RouterLoop> loop(new RouterLoop(service, config));
  loop->wake_fd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!loop->wake_fd_.valid()) {
    return Status(ErrorCode::kIoError, std::string("eventfd failed: ") + std::strerror(errno));
  }
  for (const std::string& url : config.urls) LMC_RETURN_IF_ERROR(loop->Bind(url));
  loop->affinity_pool_ = std::make_unique<AffinityPool>("transfer", config.affinity_workers,
                                                        config.max_queued_requests);
  loop->cpu_pool_ =
      std::make_unique<ThreadPool>("cpu", config.cpu_workers, config.max_queued_requests);
  return loop;
}

Status RouterLoop::Bind(const std::string& url) {
  auto socket = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::router);
  try {
    socket->set(zmq::sockopt::router_mandatory, 1);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
    socket->set(zmq::sockopt::sndhwm, kHighWaterMark);
    socket->set(zmq::sockopt::rcvhwm, kHighWaterMark);
    socket->bind(url);
  } catch (const zmq::error_t& e) {
    return Status(ErrorCode::kIoError, "cannot bind " + url + ": " + e.what());
  }
  std::string endpoint = socket->get(zmq::sockopt::last_endpoint);
  if (endpoint.starts_with("ipc://")) {
    // Only the server's user may connect: the socket grants access to the pool.
    const std::string path = endpoint.substr(6);
    if (::chmod(path.c_str(), 0600) != 0) {
      return Status(ErrorCode::kIoError, "chmod 0600 " + path + ": " + std::strerror(errno));
    }
    ipc_paths_.push_back(path);
  }
  endpoints_.push_back(std::move(endpoint));
  sockets_.push_back(std::move(socket));
  return Status::Ok();
}

void RouterLoop::Stop() {
  stop_.store(true);
  if (wake_fd_.valid()) {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof(one));
  }
}

void RouterLoop::Run() {
  std::vector<zmq::pollitem_t> items;
  for (auto& socket : sockets_) items.push_back({socket->handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({nullptr, wake_fd_.get(), ZMQ_POLLIN, 0});
  while (!stop_.load()) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(1000));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      spdlog::error("zmq poll failed: {}", e.what());
      continue;
    }
    if (items.back().revents & ZMQ_POLLIN) {
      std::uint64_t count = 0;
      (void)!::read(wake_fd_.get(), &count, sizeof(count));
    }
    for (std::size_t i = 0; i < sockets_.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) Receive(i);
    }
    DrainOutbox();
  }
  // Finish what the pools hold, then send their replies.
  affinity_pool_->Stop();
  cpu_pool_->Stop();
  DrainOutbox();
}

void RouterLoop::Receive(std::size_t socket_index) {
  zmq::socket_t& socket = *sockets_[socket_index];
  for (int n = 0; n < kReceiveBatch; ++n) {
    std::vector<std::string> frames;
    zmq::message_t part;
    try {
      if (!socket.recv(part, zmq::recv_flags::dontwait)) return;  // nothing more
      frames.emplace_back(part.data<char>(), part.size());
      while (part.more()) {
        (void)socket.recv(part, zmq::recv_flags::none);
        frames.emplace_back(part.data<char>(), part.size());
      }
    } catch (const zmq::error_t& e) {
      spdlog::warn("receive failed: {}", e.what());
      return;
    }
    received_.fetch_add(1, std::memory_order_relaxed);
    Handle(socket_index, std::move(frames));
  }
}

void RouterLoop::Reject(std::size_t socket_index, std::vector<std::string>& frames,
                        const Status& status) {
  rejected_.fetch_add(1, std::memory_order_relaxed);
  service_->CountTransportError();
  if (frames.size() < 2) return;  // no uid to answer to: a peer that is no DEALER
  Outgoing reply{socket_index, {std::move(frames[0]), std::move(frames[1])}};
  // Echo the operation frame when there was one; nil otherwise.
  reply.frames.push_back(frames.size() > 2 ? std::move(frames[2]) : Encoder().Nil().Take());
  reply.frames.push_back(Encoder().Nil().Take());
  reply.frames.push_back(EncodeErrorMap(status));
  spdlog::debug("rejected a request: {}", status.ToString());
  Send(reply);
}

void RouterLoop::Handle(std::size_t socket_index, std::vector<std::string> frames) {
  if (frames.size() < 3) {
    Reject(socket_index, frames,
           Status(ErrorCode::kMalformedRequest,
                  "a request needs at least a uid frame and an operation frame, got " +
                      std::to_string(frames.size() == 0 ? 0 : frames.size() - 1) + " frame(s)"));
    return;
  }
  auto spec = DecodeOperation(frames[2]);
  if (!spec.ok()) {
    Reject(socket_index, frames, spec.status());
    return;
  }
  auto message = std::make_shared<Message>(Message{socket_index, std::move(frames)});
  const OpSpec op = *spec;
  auto run = [this, message, op] {
    std::vector<std::string_view> payloads(message->frames.begin() + 3, message->frames.end());
    Reply reply = service_->Dispatch(op, payloads);
    Outgoing out{message->socket_index,
                 {std::move(message->frames[0]), std::move(message->frames[1]),
                  std::move(message->frames[2])}};
    if (reply.status.ok()) {
      out.frames.push_back(std::move(reply.value));
    } else {
      out.frames.push_back(EncodeFailureValue(op.failure, reply.status.message()));
      out.frames.push_back(EncodeErrorMap(reply.status));
    }
    return out;
  };
  if (op.pool == Pool::kInline) {
    Outgoing out = run();
    Send(out);
    return;
  }
  auto task = [this, run] { Complete(run()); };
  const bool queued =
      op.pool == Pool::kAffinity
          ? affinity_pool_->Submit(std::hash<std::string>{}(message->frames[0]), std::move(task))
          : cpu_pool_->Submit(std::move(task));
  if (!queued) {
    std::vector<std::string> frames_back = message->frames;
    Reject(socket_index, frames_back,
           Status(ErrorCode::kUnavailable, "server overloaded: request queue full; retry later"));
  }
}

void RouterLoop::Complete(Outgoing reply) {
  {
    MutexLock lock(&outbox_mu_);
    outbox_.push_back(std::move(reply));
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
}

void RouterLoop::DrainOutbox() {
  std::deque<Outgoing> ready;
  {
    MutexLock lock(&outbox_mu_);
    ready.swap(outbox_);
  }
  for (Outgoing& reply : ready) Send(reply);
}

void RouterLoop::Send(Outgoing& reply) {
  zmq::socket_t& socket = *sockets_[reply.socket_index];
  try {
    for (std::size_t i = 0; i < reply.frames.size(); ++i) {
      const bool last = i + 1 == reply.frames.size();
      zmq::message_t part(reply.frames[i].data(), reply.frames[i].size());
      auto sent = socket.send(part, (last ? zmq::send_flags::none : zmq::send_flags::sndmore) |
                                        zmq::send_flags::dontwait);
      if (!sent) {  // the peer's queue is full: drop rather than block every client
        undeliverable_.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("dropped a reply: the client's queue is full");
        return;
      }
    }
    replied_.fetch_add(1, std::memory_order_relaxed);
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH (ROUTER_MANDATORY): the client disconnected before its reply.
    undeliverable_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("reply undeliverable: {}", e.what());
  }
}

RouterStats RouterLoop::Stats() const {
  return {received_.load(), replied_.load(), undeliverable_.load(), rejected_.load()};
}

}  // namespace lmcache::server
