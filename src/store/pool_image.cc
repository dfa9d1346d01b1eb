#include "store/pool_image.h"

namespace lmcache::store {
namespace {

std::string Compare(const char* what, std::uint64_t ours, std::uint64_t theirs,
                    const std::string& where) {
  if (ours == theirs) return "";
  return std::string(what) + ": " + std::to_string(ours) + " here, " + std::to_string(theirs) +
         " " + where;
}

}  // namespace

std::string PoolGeometryMismatch(const PoolGeometry& ours, const PoolGeometry& theirs,
                                 const std::string& where) {
  for (const std::string& differs :
       {Compare("the pool size in bytes (--l1-size-gb)", ours.pool_bytes, theirs.pool_bytes, where),
        Compare("the alignment (--l1-align-bytes)", ours.align_bytes, theirs.align_bytes, where),
        Compare("the slab page size", ours.page_bytes, theirs.page_bytes, where),
        Compare("the slab size", ours.slab_target_bytes, theirs.slab_target_bytes, where)}) {
    if (!differs.empty()) return differs;
  }
  return "";
}

}  // namespace lmcache::store
