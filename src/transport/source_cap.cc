#include "transport/source_cap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace lmcache::transport {
namespace {

std::uint16_t LocalPort(int fd) {
  sockaddr_storage own{};
  socklen_t length = sizeof(own);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&own), &length) != 0) return 0;
  if (own.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in&>(own).sin_port);
  if (own.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6&>(own).sin6_port);
  return 0;
}

// The peer's address without its port ("" when it has none).
std::string SourceOf(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return {};
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in&>(peer).sin_addr, text, sizeof(text));
  } else if (peer.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6&>(peer).sin6_addr, text, sizeof(text));
  }
  return text;
}

}  // namespace

bool SourceCap::Accepted(int fd) {
  Closed(fd);  // a descriptor still recorded was closed unseen: its number is reused now
  std::string source = SourceOf(fd);
  if (source.empty() || LocalPort(fd) != local_port_) return true;
  std::size_t& count = count_[source];
  if (count >= max_per_source_) return false;
  count += 1;
  source_of_.emplace(fd, std::move(source));
  return true;
}

void SourceCap::Closed(int fd) {
  auto it = source_of_.find(fd);
  if (it == source_of_.end()) return;
  auto count = count_.find(it->second);
  if (count != count_.end() && --count->second == 0) count_.erase(count);
  source_of_.erase(it);
}

std::size_t SourceCap::ConnectionsFrom(const std::string& source) const {
  auto it = count_.find(source);
  return it == count_.end() ? 0 : it->second;
}

}  // namespace lmcache::transport
