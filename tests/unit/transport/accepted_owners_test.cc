// AcceptedOwners against real sockets: the owner told at the accept is the
// one a message of that connection gets, even after the client closed its
// socket (when the kernel no longer names an owner); once only; and never
// for a later connection that got the same descriptor number.
#include "transport/accepted_owners.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/unique_fd.h"
#include "fakes/loopback_listener.h"
#include "transport/tcp_peer_owner.h"

namespace lmcache::transport {
namespace {

constexpr uid_t kNobody = 65534;

using Listener = testing::LoopbackListener;

TEST(AcceptedOwnersTest, TheOwnerToldAtTheAcceptOutlivesTheClientsClose) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to connect as another uid (nobody)";
  Listener listener;
  ASSERT_TRUE(listener.bound);
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(go[1]);
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) _exit(2);
    UniqueFd client = listener.Connect();
    (void)::write(client.get(), "clear", 5);
    char byte;
    (void)::read(go[0], &byte, 1);  // closes once the parent saw the accept
    _exit(0);
  }
  ::close(go[0]);
  UniqueFd accepted = listener.Accept();
  ASSERT_TRUE(accepted.valid());
  AcceptedOwners owners;
  owners.Accepted(accepted.get());
  ::close(go[1]);  // the client closes now
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (int i = 0; i < 200 && TcpPeerOwner(accepted.get()).ok(); ++i) ::usleep(10'000);
  EXPECT_FALSE(TcpPeerOwner(accepted.get()).ok());  // asked now: no owner to tell
  auto at_accept = owners.Take(accepted.get());
  ASSERT_TRUE(at_accept.has_value());
  ASSERT_TRUE(at_accept->ok()) << at_accept->status().ToString();
  EXPECT_EQ(**at_accept, kNobody);
  EXPECT_FALSE(owners.Take(accepted.get()).has_value());  // once
}

TEST(AcceptedOwnersTest, ALaterConnectionOnTheSameNumberGetsNothingRecordedForAnEarlierOne) {
  Listener listener;
  ASSERT_TRUE(listener.bound);
  AcceptedOwners owners;
  UniqueFd first_client = listener.Connect();
  UniqueFd first = listener.Accept();
  const int number = first.get();
  owners.Accepted(number);
  UniqueFd second_client = listener.Connect();
  first = UniqueFd();  // closed unseen by a DISCONNECTED: its number is free
  UniqueFd second = listener.Accept();
  ASSERT_EQ(second.get(), number) << "the kernel gives the lowest free number";
  EXPECT_FALSE(owners.Take(number).has_value());
  EXPECT_EQ(owners.size(), 0u);
}

}  // namespace
}  // namespace lmcache::transport
