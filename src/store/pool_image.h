// What a pool is, to a server that adopts it in place rather than build it:
// its geometry (how its bytes are laid out) and its image (how far
// pre-faulting got, the allocator's slabs, the table's objects and held
// slots). A takeover hands both over (restart/takeover.h); a recovery reads
// them from the journal a dead server left (restart/pool_recovery.h).
//
// Thread-safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "alloc/slab_allocator.h"
#include "store/object_table.h"

namespace lmcache::store {

// What an image adopted in place must have been written with. Takeover and
// the journal each add what only they check (the pool's name and chunk
// size; the segment file's identity).
struct PoolGeometry {
  std::uint64_t pool_bytes = 0;
  std::uint64_t align_bytes = 0;
  std::uint64_t page_bytes = 0;
  std::uint64_t slab_target_bytes = 0;
  bool operator==(const PoolGeometry&) const = default;
};

// "" when `theirs` equals `ours`, else the first part that differs, with its
// flag and both values: "the alignment (--l1-align-bytes): 4096 here, 8192
// in the successor" for `where` "in the successor".
std::string PoolGeometryMismatch(const PoolGeometry& ours, const PoolGeometry& theirs,
                                 const std::string& where);

// The pool's state, adopted in place by a successor or a recovery.
struct PoolImage {
  std::uint64_t ready_bytes = 0;
  std::vector<alloc::SlabRecord> slabs;
  TableImage table;
};

}  // namespace lmcache::store
