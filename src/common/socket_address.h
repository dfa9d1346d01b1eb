// SocketAddress: an IPv4 or IPv6 socket address as text (what logs, caps and
// per-address counts key on), for either side of a connected socket.
//
// Thread-safety: pure functions.
#pragma once

#include <sys/socket.h>

#include <string>

namespace lmcache {

// The address of `address` without its port ("" for a family other than
// IPv4 and IPv6); its port in `port` when given (0 then).
std::string AddressText(const sockaddr_storage& address, int* port = nullptr);

// The address of socket `fd`'s peer (`peer` true) or its own side, as
// AddressText; "" when it has none (not connected, not a socket).
std::string SocketAddressText(int fd, bool peer, int* port = nullptr);

}  // namespace lmcache
