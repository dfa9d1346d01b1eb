// Which network interface of this host holds an address: how the data
// channel is kept to the interface the operator named (issue 62, section 1:
// UCX's TCP transport listens on every device it uses).
//
// Thread-safety: a pure function (getaddrinfo and getifaddrs are reentrant).
#pragma once

#include <string>
#include <string_view>

#include "lmcache/status.h"

namespace lmcache {

// The name of the interface ("lo", "eth0") that holds `host` (an IPv4 or
// IPv6 address, or a name resolved to one). kNotFound when no interface of
// this host holds it; kInvalidArgument when it does not resolve.
Result<std::string> InterfaceOfHost(std::string_view host);

}  // namespace lmcache
