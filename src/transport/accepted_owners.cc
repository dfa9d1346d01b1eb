#include "transport/accepted_owners.h"

#include <sys/socket.h>

#include <cstring>

#include "transport/tcp_peer_owner.h"

namespace lmcache::transport {
namespace {

// The peer's address and port as bytes ("" when it has none).
std::string PeerOf(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return {};
  return std::string(reinterpret_cast<const char*>(&peer), length);
}

}  // namespace

void AcceptedOwners::Accepted(int fd) {
  std::string peer = PeerOf(fd);
  if (peer.empty()) {
    owners_.erase(fd);
    return;
  }
  owners_.insert_or_assign(fd, Seen{std::move(peer), TcpPeerOwner(fd)});
}

std::optional<Result<uid_t>> AcceptedOwners::Take(int fd) {
  auto it = owners_.find(fd);
  if (it == owners_.end()) return std::nullopt;
  Seen seen = std::move(it->second);
  owners_.erase(it);
  if (PeerOf(fd) != seen.peer) return std::nullopt;  // another connection on that number
  return std::move(seen.owner);
}

}  // namespace lmcache::transport
