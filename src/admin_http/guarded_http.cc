#include "admin_http/guarded_http.h"

#include "common/socket_address.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

namespace lmcache::admin_http {
namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` (0 when past it).
int MsLeft(Clock::time_point deadline) {
  // Rounded up: a poll for the rounded-down time would end just before it.
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000));
}

bool WaitFor(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int n;
  do {
    n = ::poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
}

// A connection's stream whose reads must end by the request's deadline and
// whose writes by the reply's: a client slower than that fails them.
class DeadlineStream final : public httplib::Stream {
 public:
  explicit DeadlineStream(int fd) : fd_(fd) {}
  void StartRequest(std::chrono::milliseconds budget) {
    budget_ = budget;
    read_deadline_ = Clock::now() + budget;
    writing_ = false;
    late_ = false;
  }
  bool late() const { return late_; }

  bool is_readable() const override { return WaitFor(fd_, POLLIN, MsLeft(read_deadline_)); }
  bool is_writable() const override {
    return WaitFor(fd_, POLLOUT, MsLeft(writing_ ? write_deadline_ : Clock::now() + budget_));
  }
  ssize_t read(char* ptr, size_t size) override {
    if (!WaitFor(fd_, POLLIN, MsLeft(read_deadline_))) {
      late_ = Clock::now() >= read_deadline_;
      return -1;
    }
    ssize_t n;
    do {
      n = ::recv(fd_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!writing_) {  // the reply's clock starts at its first byte (not the handler's time)
      writing_ = true;
      write_deadline_ = Clock::now() + budget_;
    }
    if (!WaitFor(fd_, POLLOUT, MsLeft(write_deadline_))) {
      late_ = Clock::now() >= write_deadline_;
      return -1;
    }
    ssize_t n;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = SocketAddressText(fd_, /*peer=*/true, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = SocketAddressText(fd_, /*peer=*/false, &port);
  }
  socket_t socket() const override { return fd_; }

 private:
  const int fd_;
  std::chrono::milliseconds budget_{0};
  Clock::time_point read_deadline_{};
  Clock::time_point write_deadline_{};
  bool writing_ = false;
  bool late_ = false;
};

// A request read from memory, its reply written nowhere (Prime).
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(std::string request) : request_(std::move(request)) {}
  bool is_readable() const override { return at_ < request_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const std::size_t n = std::min(size, request_.size() - at_);
    std::memcpy(ptr, request_.data() + at_, n);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char*, size_t size) override { return static_cast<ssize_t>(size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 0;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 0;
  }
  socket_t socket() const override { return -1; }

 private:
  const std::string request_;
  std::size_t at_ = 0;
};

class ThreadPerConnection final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lock(state_->mu);
      state_->running += 1;
    }
    std::thread([state = state_, fn = std::move(fn)] {
      fn();
      std::lock_guard lock(state->mu);
      if (--state->running == 0) state->idle.notify_all();
    }).detach();
  }
  void shutdown() override {
    std::unique_lock lock(state_->mu);
    state_->idle.wait(lock, [this] { return state_->running == 0; });
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable idle;
    std::size_t running = 0;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

httplib::TaskQueue* NewThreadPerConnectionQueue() { return new ThreadPerConnection(); }

GuardedHttpServer::GuardedHttpServer(HttpGuardConfig config) : config_(config) {}

GuardedHttpServer::~GuardedHttpServer() = default;

GuardedHttpServer::Admission GuardedHttpServer::Admit(socket_t sock) {
  Admission admission;
  admission.address = SocketAddressText(sock, /*peer=*/true);
  MutexLock lock(&mu_);
  if (open_ >= config_.max_connections) {
    counts_.refused_connections.fetch_add(1, std::memory_order_relaxed);
    return admission;
  }
  std::size_t& from_address = per_address_[admission.address];
  const bool crowded = open_ * 4 >= config_.max_connections * 3 ||
                       from_address >= config_.fast_only_per_address;
  if (crowded) counts_.fast_only_connections.fetch_add(1, std::memory_order_relaxed);
  admission.deadline = crowded ? config_.fast_deadline : config_.request_deadline;
  admission.admitted = true;
  open_ += 1;
  from_address += 1;
  return admission;
}

void GuardedHttpServer::Release(const std::string& address) {
  MutexLock lock(&mu_);
  open_ -= 1;
  auto it = per_address_.find(address);
  if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  const Admission admission = Admit(sock);
  bool ok = false;
  if (admission.admitted) {
    DeadlineStream stream(sock);
    const auto setup = [](httplib::Request&) {};
    for (std::size_t left = config_.max_requests_per_connection; left > 0 && is_running(); --left) {
      // Idle between requests: waited for in short slices, so a stopping
      // server is not held by kept-alive connections.
      const auto idle_until = Clock::now() + config_.idle_timeout;
      bool next = false;
      while (is_running() && Clock::now() < idle_until && !next) {
        next = WaitFor(sock, POLLIN, std::min(100, MsLeft(idle_until)));
      }
      if (!next) break;
      stream.StartRequest(admission.deadline);
      bool connection_closed = false;
      ok = process_request(stream, left == 1, connection_closed, setup);
      if (stream.late()) counts_.deadline_closes.fetch_add(1, std::memory_order_relaxed);
      if (!ok || connection_closed) break;
    }
    Release(admission.address);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

void GuardedHttpServer::Prime() {
  // Paths no route serves: only httplib's own parsing and its 404 run.
  for (const char* request :
       {"GET /.lmcache-prime HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        "POST /.lmcache-prime HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}",
        "HEAD /.lmcache-prime?a=b HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"}) {
    MemoryStream stream(request);
    bool closed = false;
    (void)process_request(stream, true, closed, [](httplib::Request&) {});
  }
}

HttpGuardStats GuardedHttpServer::GuardStats() const {
  HttpGuardStats s;
  {
    MutexLock lock(&mu_);
    s.open_connections = open_;
  }
  counts_.CopyTo(&s);
  return s;
}

}  // namespace lmcache::admin_http
