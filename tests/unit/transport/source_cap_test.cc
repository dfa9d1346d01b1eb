// SourceCap against real sockets: one source address holds at most its cap
// of connections to the endpoint's port; a closed one frees its place; a
// descriptor on another port (a number the monitor reported late, now
// naming another socket) is never counted or refused.
#include "transport/source_cap.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <vector>

#include "common/unique_fd.h"

namespace lmcache::transport {
namespace {

struct Listener {
  Listener() : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    bound = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
            ::listen(fd.get(), 16) == 0 &&
            ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0;
  }
  std::uint16_t port() const { return ntohs(address.sin_port); }
  // A client connected from 127.0.0.1, and the accepted end.
  std::pair<UniqueFd, UniqueFd> Connect() const {
    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_EQ(::connect(client.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)),
              0);
    return {std::move(client), UniqueFd(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC))};
  }
  UniqueFd fd;
  sockaddr_in address{};
  bool bound = false;
};

TEST(SourceCapTest, OneSourceHoldsAtMostItsCapAndAClosedConnectionFreesItsPlace) {
  Listener listener;
  ASSERT_TRUE(listener.bound);
  SourceCap cap(3, listener.port());
  std::vector<std::pair<UniqueFd, UniqueFd>> connections;
  std::vector<bool> admitted;
  for (int i = 0; i < 5; ++i) {
    connections.push_back(listener.Connect());
    admitted.push_back(cap.Accepted(connections.back().second.get()));
  }
  EXPECT_EQ(admitted, (std::vector<bool>{true, true, true, false, false}));
  EXPECT_EQ(cap.ConnectionsFrom("127.0.0.1"), 3u);
  cap.Closed(connections[0].second.get());
  cap.Closed(connections[4].second.get());  // never recorded: nothing
  EXPECT_EQ(cap.ConnectionsFrom("127.0.0.1"), 2u);
  connections.push_back(listener.Connect());
  EXPECT_TRUE(cap.Accepted(connections.back().second.get()));
  EXPECT_EQ(cap.ConnectionsFrom("127.0.0.1"), 3u);
}

TEST(SourceCapTest, ADescriptorOnAnotherPortIsNeitherCountedNorRefused) {
  Listener ours, other;
  ASSERT_TRUE(ours.bound && other.bound);
  SourceCap cap(1, ours.port());
  auto first = ours.Connect();
  ASSERT_TRUE(cap.Accepted(first.second.get()));
  auto elsewhere = other.Connect();
  EXPECT_TRUE(cap.Accepted(elsewhere.second.get()));
  EXPECT_EQ(cap.ConnectionsFrom("127.0.0.1"), 1u);
  EXPECT_TRUE(cap.Accepted(-1));  // not a socket: let through, uncounted
}

}  // namespace
}  // namespace lmcache::transport
