#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace lmcache::internal {

void CheckFailed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "lmcache: invariant violated: %s (%s:%d)\n", condition, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace lmcache::internal
