// TcpPeerOwner: which local user owns the other end of a TCP connection
// accepted from this host (issue 44, section 6). SO_PEERCRED answers only
// for Unix sockets; for TCP the kernel's socket diagnostics (NETLINK_SOCK_DIAG,
// what `ss -e` reads) name the owner of the connecting socket, found by the
// connection's four addresses as its own side sees them.
//
// A peer on another host has no local owner: callers ask only for peers at a
// loopback address.
//
// Thread-safety: a pure function (each call opens and closes its own netlink
// socket).
#pragma once

#include <sys/types.h>

#include "lmcache/status.h"

namespace lmcache::transport {

// The uid owning the socket at the other end of the connected TCP socket
// `fd`, when that socket belongs to this host (kNotFound when the kernel
// knows no such socket: it closed meanwhile, or it is not local;
// kUnavailable when it is local but no process holds it any more (closed:
// the kernel reports such orphans as uid 0, so they have no owner to tell;
// issue 62); kIoError when the diagnostics cannot answer at all).
Result<uid_t> TcpPeerOwner(int fd);

}  // namespace lmcache::transport
