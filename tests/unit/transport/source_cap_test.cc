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
#include "fakes/loopback_listener.h"

namespace lmcache::transport {
namespace {

using Listener = testing::LoopbackListener;

// A client connected from 127.0.0.1, and the accepted end.
std::pair<UniqueFd, UniqueFd> Connected(const Listener& listener) {
  UniqueFd client = listener.Connect();
  return {std::move(client), listener.Accept()};
}

TEST(SourceCapTest, OneSourceHoldsAtMostItsCapAndAClosedConnectionFreesItsPlace) {
  Listener listener;
  ASSERT_TRUE(listener.bound);
  SourceCap cap(3, listener.port());
  std::vector<std::pair<UniqueFd, UniqueFd>> connections;
  std::vector<bool> admitted;
  for (int i = 0; i < 5; ++i) {
    connections.push_back(Connected(listener));
    admitted.push_back(cap.Accepted(connections.back().second.get()));
  }
  EXPECT_EQ(admitted, (std::vector<bool>{true, true, true, false, false}));
  EXPECT_EQ(cap.ConnectionsFrom("127.0.0.1"), 3u);
  cap.Closed(connections[0].second.get());
  cap.Closed(connections[4].second.get());  // never recorded: nothing
  EXPECT_EQ(cap.ConnectionsFrom("127.0.0.1"), 2u);
  connections.push_back(Connected(listener));
  EXPECT_TRUE(cap.Accepted(connections.back().second.get()));
  EXPECT_EQ(cap.ConnectionsFrom("127.0.0.1"), 3u);
}

TEST(SourceCapTest, ADescriptorOnAnotherPortIsNeitherCountedNorRefused) {
  Listener ours, other;
  ASSERT_TRUE(ours.bound && other.bound);
  SourceCap cap(1, ours.port());
  auto first = Connected(ours);
  ASSERT_TRUE(cap.Accepted(first.second.get()));
  auto elsewhere = Connected(other);
  EXPECT_TRUE(cap.Accepted(elsewhere.second.get()));
  EXPECT_EQ(cap.ConnectionsFrom("127.0.0.1"), 1u);
  EXPECT_TRUE(cap.Accepted(-1));  // not a socket: let through, uncounted
}

}  // namespace
}  // namespace lmcache::transport
