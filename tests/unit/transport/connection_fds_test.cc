// ConnectionFds: the orders in which a ROUTER socket's messages and its
// monitor's ACCEPTED/DISCONNECTED events can be read, descriptor reuse
// included. The orders are those a killed worker and its restarted
// replacement produce (lmcache-soak kills a worker and forks its successor
// at once; the kernel hands the successor the dead worker's descriptor).
#include "transport/connection_fds.h"

#include <gtest/gtest.h>

namespace lmcache::transport {
namespace {

using Gone = std::optional<std::string>;

TEST(ConnectionFds, ACloseEndsTheConnectionSeenOnItsDescriptor) {
  ConnectionFds fds;
  fds.Accepted(7);
  EXPECT_EQ(fds.Seen(7, "a"), std::nullopt);
  EXPECT_EQ(fds.Seen(7, "a"), std::nullopt);  // every message of it: nothing new
  EXPECT_EQ(fds.Closed(7), Gone("a"));
  EXPECT_EQ(fds.size(), 0u);
  EXPECT_EQ(fds.Closed(7), std::nullopt);  // nothing left on it
}

TEST(ConnectionFds, AMessageReadBeforeItsAcceptIsStillEndedByItsClose) {
  ConnectionFds fds;
  EXPECT_EQ(fds.Seen(7, "a"), std::nullopt);
  fds.Accepted(7);
  EXPECT_EQ(fds.Closed(7), Gone("a"));
}

TEST(ConnectionFds, ASilentConnectionsCloseReadFirstEndsNothing) {
  ConnectionFds fds;
  fds.Accepted(7);  // a probe that connects and closes without a message
  EXPECT_EQ(fds.Closed(7), std::nullopt);
  fds.Accepted(7);
  EXPECT_EQ(fds.Seen(7, "b"), std::nullopt);
  EXPECT_EQ(fds.Closed(7), Gone("b"));
}

// The old bookkeeping kept every id seen on a descriptor and ended all of
// them at its next DISCONNECTED: the successor lost its registration to its
// predecessor's death.
TEST(ConnectionFds, ASuccessorOnTheReusedDescriptorOutlivesItsPredecessorsClose) {
  ConnectionFds fds;
  fds.Accepted(7);
  EXPECT_EQ(fds.Seen(7, "dead"), std::nullopt);
  // "dead" is killed; its successor gets descriptor 7 and its first message
  // is read before the monitor's DISCONNECTED and ACCEPTED.
  EXPECT_EQ(fds.Seen(7, "successor"), Gone("dead"));  // gone at once
  EXPECT_EQ(fds.Closed(7), std::nullopt);             // dead's close: already reported
  fds.Accepted(7);
  EXPECT_EQ(fds.Seen(7, "successor"), std::nullopt);
  EXPECT_EQ(fds.Closed(7), Gone("successor"));
}

TEST(ConnectionFds, ASuccessorSeenAfterThePredecessorsCloseIsItsOwn) {
  ConnectionFds fds;
  fds.Accepted(7);
  EXPECT_EQ(fds.Seen(7, "dead"), std::nullopt);
  EXPECT_EQ(fds.Closed(7), Gone("dead"));
  EXPECT_EQ(fds.Seen(7, "successor"), std::nullopt);  // its ACCEPTED not read yet
  fds.Accepted(7);
  EXPECT_EQ(fds.Closed(7), Gone("successor"));
}

TEST(ConnectionFds, DescriptorsAreIndependent) {
  ConnectionFds fds;
  fds.Accepted(7);
  fds.Accepted(8);
  EXPECT_EQ(fds.Seen(7, "a"), std::nullopt);
  EXPECT_EQ(fds.Seen(8, "b"), std::nullopt);
  EXPECT_EQ(fds.Closed(8), Gone("b"));
  EXPECT_EQ(fds.size(), 1u);
  EXPECT_EQ(fds.Closed(7), Gone("a"));
}

TEST(ConnectionFds, AnIdSeenOnAnotherDescriptorMovesWithoutEndingIt) {
  ConnectionFds fds;
  fds.Accepted(7);
  EXPECT_EQ(fds.Seen(7, "a"), std::nullopt);
  fds.Accepted(8);
  EXPECT_EQ(fds.Seen(8, "a"), std::nullopt);  // a client that set its identity reconnected
  EXPECT_EQ(fds.Closed(7), std::nullopt);     // the old descriptor's close is not a's
  EXPECT_EQ(fds.Closed(8), Gone("a"));
}

// A killed worker's last request can still be queued in the socket when the
// monitor's DISCONNECTED is read: it is late, and must not map the dead
// connection to the descriptor again (its close was reported already).
TEST(ConnectionFds, AMessageReadAfterItsConnectionsCloseIsLate) {
  ConnectionFds fds;
  fds.Accepted(7);
  EXPECT_EQ(fds.Seen(7, "dead"), std::nullopt);
  EXPECT_FALSE(fds.IsLate(7, "dead"));
  EXPECT_EQ(fds.Closed(7), Gone("dead"));
  EXPECT_TRUE(fds.IsLate(7, "dead"));
  EXPECT_FALSE(fds.IsLate(7, "other"));  // a new connection's first message, its ACCEPTED unread
  EXPECT_FALSE(fds.IsLate(8, "dead"));
  EXPECT_EQ(fds.size(), 0u);
}

TEST(ConnectionFds, ALateMessageAfterASuccessorTookTheDescriptorIsLate) {
  ConnectionFds fds;
  fds.Accepted(7);
  EXPECT_EQ(fds.Seen(7, "dead"), std::nullopt);
  EXPECT_EQ(fds.Seen(7, "successor"), Gone("dead"));
  EXPECT_TRUE(fds.IsLate(7, "dead"));  // not Seen: it would end the successor
  fds.Accepted(7);
  EXPECT_TRUE(fds.IsLate(7, "dead"));
  EXPECT_FALSE(fds.IsLate(7, "successor"));
  EXPECT_EQ(fds.Closed(7), std::nullopt);  // dead's own close
  EXPECT_EQ(fds.Closed(7), Gone("successor"));
}

TEST(ConnectionFds, AClientWithItsOwnRoutingIdIsNotLateOnceItsReconnectIsAccepted) {
  ConnectionFds fds;
  fds.Accepted(7);
  EXPECT_EQ(fds.Seen(7, "fixed"), std::nullopt);
  EXPECT_EQ(fds.Closed(7), Gone("fixed"));
  fds.Accepted(7);  // it reconnects on the same descriptor
  EXPECT_FALSE(fds.IsLate(7, "fixed"));
  EXPECT_EQ(fds.Seen(7, "fixed"), std::nullopt);
  EXPECT_EQ(fds.Closed(7), Gone("fixed"));
}

}  // namespace
}  // namespace lmcache::transport
