// The transport's request vocabulary (transport/request.h,
// transport/request_handler.h) under the names the operation families use:
// the server implements the transport's RequestHandler and its operations
// take the transport's RequestContext, Payloads and ReplyFrames.
//
// Thread-safety: declarations only.
#pragma once

#include "transport/request.h"
#include "transport/request_handler.h"

namespace lmcache::server {

using transport::Payloads;
using transport::Pool;
using transport::ReplyFn;
using transport::ReplyFrames;
using transport::ReplyKind;
using transport::RequestContext;
using transport::RequestHandler;
using transport::RequestRoute;
using transport::StreamSignal;
using transport::IsLoopbackAddress;
using transport::Transport;
using transport::TransportName;
using transport::TransportStats;

}  // namespace lmcache::server
