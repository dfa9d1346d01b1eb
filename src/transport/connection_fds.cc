#include "transport/connection_fds.h"

#include <algorithm>

namespace lmcache::transport {

void ConnectionFds::Accepted(int fd) { fds_[fd].accepted += 1; }

std::optional<std::string> ConnectionFds::Seen(int fd, std::string_view connection) {
  if (auto known = fd_of_.find(std::string(connection)); known != fd_of_.end()) {
    if (known->second == fd) return std::nullopt;
    // A routing id reused on another descriptor: the old mapping is stale.
    Forget(fds_[known->second]);
  }
  Descriptor& descriptor = fds_[fd];
  // Sessions are numbered from 1 by their ACCEPTED events. With every read
  // session closed, this message's ACCEPTED is still unread: the next one.
  std::uint64_t session =
      descriptor.accepted > descriptor.closed ? descriptor.accepted : descriptor.accepted + 1;
  std::optional<std::string> gone;
  if (!descriptor.connection.empty()) {
    // The descriptor was reused: its previous connection closed, in the
    // session it was seen in, and this one is in a later one.
    session = std::max(session, descriptor.session + 1);
    gone = Forget(descriptor);
    descriptor.last_closed = *gone;
  }
  descriptor.connection = std::string(connection);
  descriptor.session = session;
  fd_of_.emplace(descriptor.connection, fd);
  return gone;
}

std::optional<std::string> ConnectionFds::Closed(int fd) {
  auto it = fds_.find(fd);
  if (it == fds_.end()) return std::nullopt;
  Descriptor& descriptor = it->second;
  descriptor.closed += 1;
  std::optional<std::string> gone;
  // A close of an earlier session than the connection's is its
  // predecessor's, already reported gone (or never seen).
  if (!descriptor.connection.empty() && descriptor.closed >= descriptor.session) {
    gone = Forget(descriptor);
    descriptor.last_closed = *gone;
  }
  if (descriptor.connection.empty() && descriptor.closed >= descriptor.accepted) {
    // Every session on it closed: count afresh. The entry itself stays (one
    // per descriptor number) to recognise the closed connection's late messages.
    descriptor.accepted = descriptor.closed = descriptor.session = 0;
  }
  return gone;
}

bool ConnectionFds::IsLate(int fd, std::string_view connection) const {
  auto it = fds_.find(fd);
  if (it == fds_.end()) return false;
  const Descriptor& descriptor = it->second;
  if (descriptor.last_closed.empty() || descriptor.last_closed != connection) return false;
  // No session accepted since the close: the message can only be the closed
  // connection's. Or the descriptor already carries another connection.
  return descriptor.accepted <= descriptor.closed ||
         (!descriptor.connection.empty() && descriptor.connection != connection);
}

std::optional<std::string> ConnectionFds::Forget(Descriptor& descriptor) {
  if (descriptor.connection.empty()) return std::nullopt;
  fd_of_.erase(descriptor.connection);
  std::optional<std::string> gone = std::move(descriptor.connection);
  descriptor.connection.clear();
  return gone;
}

}  // namespace lmcache::transport
