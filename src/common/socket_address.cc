#include "common/socket_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace lmcache {

std::string AddressText(const sockaddr_storage& address, int* port) {
  char text[INET6_ADDRSTRLEN] = {};
  int number = 0;
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text));
    number = ntohs(in.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text));
    number = ntohs(in6.sin6_port);
  }
  if (port != nullptr) *port = number;
  return text;
}

std::string SocketAddressText(int fd, bool peer, int* port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  if (rc != 0) {
    if (port != nullptr) *port = 0;
    return {};
  }
  return AddressText(address, port);
}

}  // namespace lmcache
