// The warm prefetch routes, with the reference's paths and fields (p2p-spec.md
// 13.2): POST /cache/prefetches loads a prompt's chunks from L2 into L1
// before its traffic arrives (server/warm_prefetches.h) and answers 202
// {request_id, chunks, status: "submitted" | "noop"}; GET
// /cache/prefetches/{id} answers {status: "pending"} while it loads, then
// {status: "completed", found_keys, total_keys} once, then 404. POST needs
// the admin token (route_helpers.h); GET is open (ids are random).
//
// Thread-safety: the handlers run on the HTTP server's threads and call the
// internally synchronised WarmPrefetches.
#pragma once

#include <string>

#include "admin_http/http_config.h"
#include "admin_http/route_table.h"
#include "lmcache/status.h"
#include "server/warm_prefetches.h"

namespace lmcache::server {
class Service;
}

namespace lmcache::admin_http {

// The request a POST body names (kInvalidArgument: 400's message).
Result<server::WarmRequest> WarmRequestFromBody(const std::string& body);

void AddPrefetchRoutes(RouteTable& routes, server::Service& service);

}  // namespace lmcache::admin_http
