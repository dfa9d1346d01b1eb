// WatchServer: what a serving server's Health (health.h) checks: the request
// loop's, the evictor's and the maintenance thread's heartbeats, a transfer
// mode that cannot work, an endpoint that failed to accept in the last 10 s,
// and (with --ready-prefault-fraction) the pool's pre-faulting.
//
// Thread-safety: once, before serving (Health's Watch and Require are not
// synchronised); the checks it installs read thread-safe figures.
#pragma once

#include "admin_http/health.h"
#include "server/service.h"
#include "store/l1_cache.h"
#include "transport/router_loop.h"

namespace lmcache::admin_http {

// Everything watched must outlive `health`. `ready_prefault_fraction` 0:
// the pre-faulting is not waited for.
void WatchServer(Health& health, transport::RouterLoop& router, store::L1Cache& l1,
                 server::Service& service, double ready_prefault_fraction);

}  // namespace lmcache::admin_http
