// StoreListener: what the object table tells the rest of the server about
// objects that come and go (the model is Dragonfly's tiering notifications).
//
// The statistics subscribe to count admissions, evictions and deletions; the
// L2 store controller subscribes to admissions, to write new objects behind.
// An admission says where the bytes came from, so objects loaded from a
// slower tier are not written back to it.
//
// Thread-safety: callbacks run on the thread of the table operation that
// caused them, after that operation released the table's locks, possibly on
// many threads at once. They must be quick and must not block (enqueue and
// return); they may call back into the table. Listeners are added before the
// table is used (AddListener is not synchronised) and stay valid for as long
// as the table is used.
#pragma once

#include <cstdint>
#include <span>

#include "store/object_key.h"

namespace lmcache::store {

enum class AdmissionSource : std::uint8_t {
  kWriter,  // a client's store (commit_store, the GPU path)
  kTier,    // loaded from a slower tier (an L2 prefetch)
};

class StoreListener {
 public:
  virtual ~StoreListener() = default;
  // `keys[i]` became resident, taking `bytes[i]` (aligned) of the pool.
  virtual void OnAdmitted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes,
                          AdmissionSource source) = 0;
  // Evicted to make room (watermark or on demand).
  virtual void OnEvicted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes) = 0;
  // Deleted (delete, clear); a locked object counts when it is retired.
  virtual void OnDeleted(std::span<const ObjectKey> keys, std::span<const std::uint64_t> bytes) = 0;
};

}  // namespace lmcache::store
