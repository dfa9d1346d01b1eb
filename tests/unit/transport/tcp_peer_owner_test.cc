// TcpPeerOwner against real sockets: a connection made by this process is
// owned by our uid; one made by a child that switched to another uid (root
// only: nobody's uid, 65534) is owned by that uid, which is what the router
// refuses by default on a loopback endpoint. A socket that is not connected
// is an error, never a uid.
#include "transport/tcp_peer_owner.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/unique_fd.h"

namespace lmcache::transport {
namespace {

constexpr uid_t kNobody = 65534;

// A listener on 127.0.0.1 (or ::1) at a port the kernel picks.
struct Listener {
  explicit Listener(int address_family) : family(address_family) {
    fd = UniqueFd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_TRUE(fd.valid());
    if (family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&address);
      in->sin_family = AF_INET;
      in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      length = sizeof(*in);
    } else {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
      in6->sin6_family = AF_INET6;
      in6->sin6_addr = in6addr_loopback;
      length = sizeof(*in6);
    }
    bound = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), length) == 0 &&
            ::listen(fd.get(), 4) == 0 &&
            ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0;
  }
  // A client socket connected to it (in this process).
  UniqueFd Connect() const {
    UniqueFd client(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_EQ(::connect(client.get(), reinterpret_cast<const sockaddr*>(&address), length), 0);
    return client;
  }
  UniqueFd Accept() const { return UniqueFd(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC)); }

  int family;
  UniqueFd fd;
  bool bound = false;
  sockaddr_storage address{};
  socklen_t length = 0;
};

TEST(TcpPeerOwnerTest, AConnectionOfThisProcessIsOwnedByOurUid) {
  for (int family : {AF_INET, AF_INET6}) {
    Listener listener(family);
    if (family == AF_INET6 && !listener.bound) continue;  // no IPv6 loopback here
    ASSERT_TRUE(listener.bound);
    UniqueFd client = listener.Connect();
    UniqueFd accepted = listener.Accept();
    ASSERT_TRUE(accepted.valid());
    Result<uid_t> owner = TcpPeerOwner(accepted.get());
    ASSERT_TRUE(owner.ok()) << owner.status().ToString();
    EXPECT_EQ(*owner, ::getuid()) << (family == AF_INET ? "IPv4" : "IPv6");
  }
}

TEST(TcpPeerOwnerTest, AConnectionOfAnotherUsersProcessIsOwnedByThatUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to connect as another uid (nobody)";
  Listener listener(AF_INET);
  ASSERT_TRUE(listener.bound);
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Connects as nobody, then holds the connection until the parent is done.
    ::close(ready[1]);
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) _exit(2);
    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(client.get(), reinterpret_cast<const sockaddr*>(&listener.address),
                  listener.length) != 0) {
      _exit(3);
    }
    char byte = 0;
    (void)::read(ready[0], &byte, 1);
    _exit(0);
  }
  UniqueFd accepted = listener.Accept();
  ASSERT_TRUE(accepted.valid());
  Result<uid_t> owner = TcpPeerOwner(accepted.get());
  ::close(ready[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  EXPECT_EQ(*owner, kNobody);
}

// A client that closed its end at once (issue 62, section 2): the kernel
// keeps its socket only as an orphan in FIN-WAIT-2, inode 0, and reports uid
// 0 for it. Taken as the owner, that let a client running as nobody pass as
// root when the server runs as root; its owner cannot be told, so it is an
// error, never a uid.
TEST(TcpPeerOwnerTest, AClientThatClosedAtOnceHasNoOwnerNotRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to connect as another uid (nobody)";
  Listener listener(AF_INET);
  ASSERT_TRUE(listener.bound);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) _exit(2);
    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(client.get(), reinterpret_cast<const sockaddr*>(&listener.address),
                  listener.length) != 0) {
      _exit(3);
    }
    const char request[] = "clear";
    (void)::write(client.get(), request, sizeof(request));
    _exit(0);  // closes the socket: a FIN, and the socket is an orphan
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  UniqueFd accepted = listener.Accept();
  ASSERT_TRUE(accepted.valid());
  // The request is there to read, and then the end of the stream.
  char buffer[16];
  ASSERT_EQ(::read(accepted.get(), buffer, sizeof(buffer)), 6);
  ASSERT_EQ(::read(accepted.get(), buffer, sizeof(buffer)), 0);
  // Once our ACK of its FIN reached it, the orphan is a time-wait socket
  // (FIN-WAIT-2, uid 0, inode 0); until then a full one in FIN-WAIT-1.
  Result<uid_t> owner = TcpPeerOwner(accepted.get());
  for (int i = 0; i < 200 && owner.ok() && *owner == kNobody; ++i) {
    ::usleep(10'000);
    owner = TcpPeerOwner(accepted.get());
  }
  ASSERT_FALSE(owner.ok()) << "owner reported as uid " << *owner;
  EXPECT_EQ(owner.status().code(), ErrorCode::kUnavailable) << owner.status().ToString();
}

TEST(TcpPeerOwnerTest, ASocketThatIsNotConnectedHasNoOwner) {
  Listener listener(AF_INET);
  ASSERT_TRUE(listener.bound);
  EXPECT_FALSE(TcpPeerOwner(listener.fd.get()).ok());  // a listener: no peer
  EXPECT_FALSE(TcpPeerOwner(-1).ok());
}

}  // namespace
}  // namespace lmcache::transport
