// The pin routes (the reference's coordinator has them, ref-counted, p2p-spec
// 13.3): POST /cache/pins adds a pin to each object a body names (its keys,
// or a prompt's tokens and model), DELETE /cache/pins takes one away, GET
// /cache/pins pages through the pinned objects with their counts. A pinned
// object is never evicted (store/object_table.h, Pin); first pins past
// --max-pinned-fraction of the pool answer 409. All three need the admin
// token (route_helpers.h); the listing names keys, so read-only mode does not
// refuse it.
//
// Thread-safety: the handlers run on the HTTP server's threads and call the
// internally synchronised object table.
#pragma once

#include "admin_http/http_config.h"
#include "admin_http/route_table.h"

namespace lmcache::server {
class Service;
}

namespace lmcache::admin_http {

void AddPinRoutes(RouteTable& routes, server::Service& service);

}  // namespace lmcache::admin_http
