// Endpoints: every address one server binds, with the flag that names it,
// and the refusal of a configuration in which two of them name the same
// address (a ZMQ socket, the kv-events PUB and replay sockets, the HTTP port,
// the takeover socket). Two ZMQ sockets bound on one ipc path both "succeed"
// and every client then hangs, so this is checked at startup, not left to
// the bind.
//
// Thread-safety: plain functions over values.
#pragma once

#include <string>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::daemon {

struct NamedEndpoint {
  std::string flag;     // "--url", "--http-host/--http-port", ...
  std::string address;  // tcp://HOST:PORT, ipc://PATH, or unix:PATH for a plain unix socket
};

// Fails, naming both flags and the address, when two endpoints would bind
// the same address: the same ipc path or unix socket (after making it
// absolute and normal), or the same tcp port on the same host or where
// either host is a wildcard (*, 0.0.0.0, ::). An ephemeral port (0 or *)
// conflicts with nothing.
Status RefuseSharedEndpoints(const std::vector<NamedEndpoint>& endpoints);

}  // namespace lmcache::daemon
