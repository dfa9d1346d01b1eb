// SlotJournal: what the store tells a journal of the L1 pool's slots, and
// nothing of how the journal keeps it. The crash-recovery journal
// (restart/pool_journal.h, --recover-pool) is the one implementation; the
// store only calls it at the transitions of a slot's life, as it tells the
// allocator's slabs to a SlabObserver:
//
//   Lent       a writer was lent the slot (before the writer learns of it)
//   Committed  an object was admitted there (lent before, or adopted)
//   Withdrawn  the object left the index (a lease may still read it)
//   Held       a slot kept from reuse until a time, never served (a restart's)
//   Freed      the slot goes back to the allocator (before it can be lent again)
//
// plus pre-faulting's progress (ReadyBytes) and the journal's own life
// (Publish once the pool is whole, Disown when a successor took it over).
//
// Thread-safety: implementations are internally synchronised and every
// method may be called from any thread. Committed, Withdrawn and Held are
// called with an object shard's lock held, Lent and Freed under none, the
// SlabObserver calls under the allocator's mutex: an implementation's lock
// is a leaf in the lock order, and none of its methods calls back into the
// store or blocks for long.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "alloc/slab_allocator.h"
#include "common/clock.h"
#include "lmcache/status.h"
#include "store/object_key.h"
#include "store/store_stats.h"

namespace lmcache::shm {
class ShmSegment;
}

namespace lmcache::store {

struct PoolGeometry;  // pool_image.h

class SlotJournal : public alloc::SlabObserver {
 public:
  ~SlotJournal() override = default;

  virtual void Lent(std::span<const alloc::Offset> offsets, std::uint64_t size) = 0;
  virtual void Held(alloc::Offset offset, std::uint64_t size, TimeMs until_ms) = 0;
  // `checksum`, when given, is one a recovery verified: recorded as final.
  virtual void Committed(const ObjectKey& key, alloc::Offset offset, std::uint64_t size,
                         std::optional<std::uint64_t> checksum) = 0;
  virtual void Withdrawn(alloc::Offset offset) = 0;
  virtual void Freed(alloc::Offset offset) = 0;
  // Pages below `bytes` may be lent from now on (called before they are).
  virtual void ReadyBytes(std::uint64_t bytes) = 0;

  // The pool is whole (every adopted object and held slot recorded): the
  // journal replaces any a predecessor left. Idempotent.
  virtual Status Publish() = 0;
  // A successor took the pool over and keeps its own journal: leave ours.
  virtual void Disown() = 0;
  virtual JournalStats Stats() const = 0;
};

// Makes the journal of a pool being built (L1Config::journal): `pool_name`
// is the segment's name, `segment` the segment itself (its file and bytes).
using SlotJournalFactory = std::function<Result<std::unique_ptr<SlotJournal>>(
    const std::string& pool_name, const PoolGeometry& geometry, const shm::ShmSegment& segment)>;

}  // namespace lmcache::store
