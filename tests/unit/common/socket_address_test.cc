// SocketAddressText on real sockets: both sides of a loopback connection,
// with their ports; nothing for a descriptor that is not a connected socket.
#include "common/socket_address.h"

#include <gtest/gtest.h>

#include "fakes/loopback_listener.h"

namespace lmcache {
namespace {

TEST(SocketAddressTest, BothSidesOfAConnectionWithTheirPorts) {
  testing::LoopbackListener listener;
  ASSERT_TRUE(listener.bound);
  UniqueFd client = listener.Connect();
  UniqueFd accepted = listener.Accept();
  int own_port = 0;
  int peer_port = 0;
  EXPECT_EQ(SocketAddressText(accepted.get(), /*peer=*/false, &own_port), "127.0.0.1");
  EXPECT_EQ(own_port, listener.port());
  EXPECT_EQ(SocketAddressText(accepted.get(), /*peer=*/true, &peer_port), "127.0.0.1");
  int client_port = 0;
  SocketAddressText(client.get(), /*peer=*/false, &client_port);
  EXPECT_EQ(peer_port, client_port);
  EXPECT_NE(peer_port, 0);
}

TEST(SocketAddressTest, NoAddressForWhatIsNotAConnectedSocket) {
  int port = 7;
  EXPECT_EQ(SocketAddressText(-1, /*peer=*/true, &port), "");
  EXPECT_EQ(port, 0);
  testing::LoopbackListener listener;
  EXPECT_EQ(SocketAddressText(listener.fd.get(), /*peer=*/true), "");  // a listener has no peer
}

}  // namespace
}  // namespace lmcache
