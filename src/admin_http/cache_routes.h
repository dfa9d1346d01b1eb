// Listing and deleting cached objects by key, with the reference's routes
// and fields (p2p-spec.md 13.2): GET /cache/objects pages through one tier
// (L1, or one L2 adapter that keeps an index: fs, mock) and DELETE
// /cache/objects deletes by key, or by a prompt's tokens and model, from
// L1, L2 or both. Keys travel in the reference's EncodedObjectKey form
// (key_selection.h).
//
// Both routes need the admin token (route_helpers.h): a listing names
// every tenant's salt and which prompts are cached, what the rest of the
// server keeps from other local users (docs/security.md).
//
// Thread-safety: the handlers run on the HTTP server's threads and call
// internally synchronised parts (the object table, the L2 adapters).
#pragma once

#include "admin_http/http_config.h"
#include "admin_http/route_table.h"

namespace lmcache::server {
class Service;
}
namespace lmcache::tier {
class L2Tier;
}

namespace lmcache::admin_http {

// `l2` may be null (no L2 tier).
void AddCacheRoutes(RouteTable& routes, server::Service& service, tier::L2Tier* l2);

}  // namespace lmcache::admin_http
