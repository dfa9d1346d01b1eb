#include "fleet/last_copy_bias.h"

#include "fleet/chunk_log.h"

namespace lmcache::fleet {

std::vector<bool> LastCopyBias::Expendable(std::span<const store::ObjectKey> keys) const {
  return directory_->KeptElsewhere(ChunkIdsOf(keys), own_incarnation_);
}

}  // namespace lmcache::fleet
