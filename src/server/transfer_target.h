// What every transfer operation of both modes names first: the key and the
// registered instance, decoded from the request's first two payloads; and
// the instance alone, as unregistering in either mode names it.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "lmcache/messages.h"
#include "lmcache/status.h"
#include "protocol/wire_codec.h"
#include "server/request.h"

namespace lmcache::server {

struct TransferTarget {
  IpcKey key;
  std::int64_t instance_id = 0;
};
Result<TransferTarget> DecodeTransferTarget(Payloads p, const protocol::KeyLimits& limits);

// The instance id of the first payload.
Result<std::int64_t> DecodeInstanceId(Payloads p);

}  // namespace lmcache::server
