#include "store/owner.h"

namespace lmcache::store {

std::string Owner::DebugString() const {
  switch (kind) {
    case OwnerKind::kInstance: return "instance:" + std::to_string(id);
    case OwnerKind::kSession: return "session:" + std::to_string(id);
    case OwnerKind::kInternal: return "internal:" + std::to_string(id);
    case OwnerKind::kDevice: return "device:" + std::to_string(id);
    case OwnerKind::kPeer: return "peer:" + std::to_string(id);
  }
  return "unknown:" + std::to_string(id);
}

}  // namespace lmcache::store
