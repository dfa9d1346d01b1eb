// UringReads in a build without liburing (LMC_IO_URING=OFF): never available,
// so the fs adapter reads with blocking calls ("auto") or refuses ("io_uring").
#include "tier/fs/uring_reads.h"

namespace lmcache::tier {

Result<std::unique_ptr<UringReads>> UringReads::Create(unsigned /*rings*/, unsigned /*depth*/) {
  return Status(ErrorCode::kUnavailable,
                "io_uring is not available: this server was built without it (LMC_IO_URING=OFF)");
}

}  // namespace lmcache::tier
