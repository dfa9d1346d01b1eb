// HostPort: "HOST:PORT" and "[IPV6]:PORT" as operators write them in URLs and
// flags, split and checked in one place (a Redis URL, a --p2p-peers entry).
// The host is returned as written (a name or an address, brackets removed)
// and is not resolved or otherwise judged: callers that accept only some
// hosts check them. Errors give the reason only; the caller names the flag
// or URL it came from.
//
// Thread-safety: plain functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lmcache/status.h"

namespace lmcache {

struct HostPort {
  std::string host;  // an IPv6 address without its brackets
  std::uint16_t port = 0;
  // HOST:PORT, with brackets around an IPv6 address.
  std::string ToString() const;
  friend bool operator==(const HostPort&, const HostPort&) = default;
};

// Splits `text`. Without a port, `default_port` is used, or, when it is 0,
// the text is refused. A port must be a number in 1..65535; a host must not
// be empty; "[" must close before the port.
Result<HostPort> ParseHostPort(std::string_view text, std::uint16_t default_port = 0);

}  // namespace lmcache
