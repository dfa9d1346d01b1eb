#include "transport/tcp_peer_owner.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/unique_fd.h"

namespace lmcache::transport {
namespace {

Status Errno(const std::string& what) {
  return Status(ErrorCode::kIoError, what + ": " + std::strerror(errno));
}

// Copies `address`'s port (network order) and address into a diag socket id
// side: the kernel compares them as the socket's own side stores them.
void Fill(const sockaddr_storage& address, __be16* port, __be32* words) {
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    *port = in.sin_port;
    std::memcpy(words, &in.sin_addr, sizeof(in.sin_addr));
  } else {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    *port = in6.sin6_port;
    std::memcpy(words, &in6.sin6_addr, sizeof(in6.sin6_addr));
  }
}

// The kernel's TCP states (include/net/tcp_states.h).
constexpr std::uint8_t kTcpEstablished = 1;
constexpr std::uint8_t kTcpCloseWait = 8;

}  // namespace

Result<uid_t> TcpPeerOwner(int fd) {
  sockaddr_storage local{};
  sockaddr_storage peer{};
  socklen_t local_length = sizeof(local);
  socklen_t peer_length = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0) {
    return Errno("getsockname");
  }
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0) {
    return Errno("getpeername");
  }
  if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) {
    return Status(ErrorCode::kInvalidArgument, "not a TCP/IP connection");
  }
  UniqueFd diag(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!diag.valid()) return Errno("socket(NETLINK_SOCK_DIAG)");
  // The peer's socket: its source is the peer's address, its destination ours.
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } ask{};
  ask.header.nlmsg_len = sizeof(ask);
  ask.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  ask.header.nlmsg_flags = NLM_F_REQUEST;
  ask.request.sdiag_family = peer.ss_family;
  ask.request.sdiag_protocol = IPPROTO_TCP;
  ask.request.idiag_states = ~0u;
  Fill(peer, &ask.request.id.idiag_sport, ask.request.id.idiag_src);
  Fill(local, &ask.request.id.idiag_dport, ask.request.id.idiag_dst);
  ask.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  ask.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(diag.get(), &ask, sizeof(ask), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) != static_cast<ssize_t>(sizeof(ask))) {
    return Errno("sending the socket diagnostics request");
  }
  alignas(nlmsghdr) char reply[8192];
  const ssize_t n = ::recv(diag.get(), reply, sizeof(reply), 0);
  if (n < 0) return Errno("reading the socket diagnostics reply");
  const auto* header = reinterpret_cast<const nlmsghdr*>(reply);
  if (!NLMSG_OK(header, static_cast<unsigned>(n))) {
    return Status(ErrorCode::kIoError, "a malformed socket diagnostics reply");
  }
  if (header->nlmsg_type == NLMSG_ERROR) {
    nlmsgerr error{};
    std::memcpy(&error, reply + NLMSG_HDRLEN, std::min<std::size_t>(sizeof(error), n - NLMSG_HDRLEN));
    // ENOENT: the kernel knows no such socket (another host, another network
    // namespace, or it closed). Anything else (no sock_diag, EPERM) says
    // nothing about the peer.
    return Status(error.error == -ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError,
                  std::string("socket diagnostics: ") + std::strerror(-error.error));
  }
  if (header->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
      header->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) {
    return Status(ErrorCode::kIoError, "an unexpected socket diagnostics reply");
  }
  inet_diag_msg found{};
  std::memcpy(&found, reply + NLMSG_HDRLEN, sizeof(found));
  // Only a socket some process still holds has an owner. One its process
  // closed is an orphan (inode 0: FIN-WAIT, TIME-WAIT) that the kernel
  // reports as uid 0, which would pass any client as root.
  if (found.idiag_inode == 0 ||
      (found.idiag_state != kTcpEstablished && found.idiag_state != kTcpCloseWait)) {
    return Status(ErrorCode::kUnavailable,
                  "the peer's socket is closed (TCP state " + std::to_string(found.idiag_state) +
                      ", no process holds it): its owner cannot be told");
  }
  return static_cast<uid_t>(found.idiag_uid);
}

}  // namespace lmcache::transport
