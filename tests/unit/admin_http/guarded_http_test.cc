// GuardedHttpServer with a real listener and real sockets, at small bounds:
// clients trickling a request hold no probe off (each connection has its
// own thread, and admission past the per-address bound gets the fast
// deadline); a request slower than its deadline loses its connection
// (counted); past the connection bound a connection is closed unanswered.
#include "admin_http/guarded_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace lmcache::admin_http {
namespace {

using namespace std::chrono_literals;

class GuardedHttpTest : public ::testing::Test {
 protected:
  void Start(HttpGuardConfig config) {
    server_ = std::make_unique<GuardedHttpServer>(config);
    server_->new_task_queue = [] { return NewThreadPerConnectionQueue(); };
    server_->Get("/healthcheck", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"healthy\"}", "application/json");
    });
    server_->Prime();
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    while (!server_->is_running()) std::this_thread::sleep_for(1ms);
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  // A connection that has sent the start of a request and nothing more.
  UniqueFd Trickler() const {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port_));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    const char start[] = "GET /healthcheck HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    EXPECT_GT(::send(fd.get(), start, sizeof(start) - 1, MSG_NOSIGNAL), 0);
    return fd;
  }
  bool Probe() const {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(2);
    client.set_read_timeout(2);
    auto reply = client.Get("/healthcheck");
    return reply && reply->status == 200;
  }
  // Whether the server closed `fd` (a read sees the end, after whatever
  // error reply it sent) within `limit`.
  static bool ClosedWithin(int fd, std::chrono::milliseconds limit) {
    timeval tv{static_cast<time_t>(limit.count() / 1000),
               static_cast<suseconds_t>((limit.count() % 1000) * 1000)};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buffer[512];
    while (true) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n > 0) continue;
      return n == 0 || errno == ECONNRESET;
    }
  }

  std::unique_ptr<GuardedHttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(GuardedHttpTest, TricklingClientsHoldNoProbeOff) {
  Start({.max_connections = 64, .fast_only_per_address = 4, .request_deadline = 10s,
         .fast_deadline = 1s});
  std::vector<UniqueFd> slow;
  for (int i = 0; i < 8; ++i) slow.push_back(Trickler());
  std::this_thread::sleep_for(100ms);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(Probe()) << "probe " << i;
  EXPECT_GE(server_->GuardStats().fast_only_connections, 4u);
}

TEST_F(GuardedHttpTest, ARequestSlowerThanItsDeadlineLosesItsConnection) {
  Start({.max_connections = 64, .fast_only_per_address = 64, .request_deadline = 300ms,
         .fast_deadline = 100ms});
  UniqueFd slow = Trickler();
  EXPECT_TRUE(ClosedWithin(slow.get(), 5s));
  for (int i = 0; i < 100 && server_->GuardStats().deadline_closes == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(server_->GuardStats().deadline_closes, 1u);
  EXPECT_TRUE(Probe());
}

TEST_F(GuardedHttpTest, PastTheConnectionBoundAConnectionIsClosedUnanswered) {
  Start({.max_connections = 3, .fast_only_per_address = 64, .request_deadline = 10s,
         .fast_deadline = 10s});
  std::vector<UniqueFd> held;
  for (int i = 0; i < 3; ++i) held.push_back(Trickler());
  for (int i = 0; i < 100 && server_->GuardStats().open_connections < 3; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(server_->GuardStats().open_connections, 3u);
  UniqueFd refused = Trickler();
  EXPECT_TRUE(ClosedWithin(refused.get(), 5s));
  EXPECT_EQ(server_->GuardStats().refused_connections, 1u);
  held.clear();  // their connections end; the server has room again
  for (int i = 0; i < 200 && server_->GuardStats().open_connections > 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(Probe());
}

}  // namespace
}  // namespace lmcache::admin_http
