#include "server/transfer_target.h"

namespace lmcache::server {

Result<TransferTarget> DecodeTransferTarget(Payloads p, const protocol::KeyLimits& limits) {
  TransferTarget target;
  LMC_ASSIGN_OR_RETURN(target.key, protocol::DecodeIpcKey(p[0], limits));
  LMC_ASSIGN_OR_RETURN(target.instance_id, protocol::DecodeInt(p[1], "instance_id"));
  return target;
}

Result<std::int64_t> DecodeInstanceId(Payloads p) {
  return protocol::DecodeInt(p[0], "instance_id");
}

}  // namespace lmcache::server
