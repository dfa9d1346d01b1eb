#include "common/net_interfaces.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace lmcache {
namespace {

struct AddrInfoFree {
  void operator()(addrinfo* list) const { ::freeaddrinfo(list); }
};
struct IfAddrsFree {
  void operator()(ifaddrs* list) const { ::freeifaddrs(list); }
};

bool SameAddress(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(b)->sin_addr, sizeof(in_addr)) == 0;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

Result<std::string> InterfaceOfHost(std::string_view host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* raw = nullptr;
  const std::string name(host);
  if (int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &raw); rc != 0) {
    return Status(ErrorCode::kInvalidArgument,
                  "'" + name + "' does not resolve: " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, AddrInfoFree> addresses(raw);
  ifaddrs* raw_interfaces = nullptr;
  if (::getifaddrs(&raw_interfaces) != 0) {
    return Status(ErrorCode::kIoError, std::string("getifaddrs: ") + std::strerror(errno));
  }
  std::unique_ptr<ifaddrs, IfAddrsFree> interfaces(raw_interfaces);
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    for (const ifaddrs* i = interfaces.get(); i != nullptr; i = i->ifa_next) {
      if (SameAddress(a->ai_addr, i->ifa_addr)) return std::string(i->ifa_name);
    }
  }
  return Status(ErrorCode::kNotFound, "no interface of this host holds '" + name + "'");
}

}  // namespace lmcache
