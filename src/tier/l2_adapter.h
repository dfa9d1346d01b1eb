// L2Adapter: one slower tier behind L1 (a directory of files, a Redis
// Cluster, an in-memory mock), as the controllers see it.
//
// Stores and loads are submitted in batches and complete through a callback
// (memcached's extstore IO objects, Dragonfly's tiering OpManager): an
// adapter whose device completes on its own (io_uring, GPUDirect Storage,
// RDMA) returns from Submit* at once and calls back from its completion
// thread; one that does the work on the caller's thread (BlockingL2Adapter:
// fs, resp, mock) calls back before Submit* returns. The controllers run
// every call on their own worker threads, never a request thread, so a slow
// tier delays only L2 work. Before any call, AttachMemory shows the adapter
// the L1 pool every buffer it is handed lies in, once, for a device that
// registers memory up front. An adapter stores whole objects (the commit
// point is the object becoming visible complete: a rename, a SET), verifies
// what it loads (a corrupt object is a miss and is deleted, never bytes
// handed to a worker), and never throws. Lookups lock what they found
// against the adapter's own eviction until Unlock, so a planned load does not
// lose its object between the two phases (an adapter whose tier evicts by
// itself, like Redis, may still miss; the prefetch then serves the shorter
// prefix).
//
// Thread-safety: every method may be called from any number of threads; a
// completion may run on any thread, exactly once per submission.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/histogram.h"
#include "lmcache/status.h"
#include "stats/declare.h"
#include "store/object_key.h"
#include "store/tenant_ledger.h"
#include "tier/load_cost.h"
#include "tier/payload_codec.h"
#include "tier/tier_stats.h"

namespace lmcache::tier {

// One object to store; `bytes` stay valid (read-locked in L1, or the serde
// wrapper's buffer) for the call. `encoding` says what `bytes` are: the
// object as L1 holds it (raw), or its encoding (serde_adapter.h), which the
// adapter records in the object's header.
struct L2Write {
  L2Write() = default;
  L2Write(const store::ObjectKey* object_key, std::span<const std::byte> object_bytes,
          PayloadEncoding stored_as = {})
      : key(object_key), bytes(object_bytes), encoding(stored_as) {}

  const store::ObjectKey* key = nullptr;
  std::span<const std::byte> bytes;
  PayloadEncoding encoding;
};

// One object to load into `out` (a staged L1 buffer of the object's size).
// An object stored encoded is decoded into it by the adapter that read it,
// on that adapter's own thread, whatever serde the adapter is configured with.
struct L2Read {
  const store::ObjectKey* key = nullptr;
  std::span<std::byte> out;
};

enum class L2LoadOutcome : std::uint8_t {
  kLoaded,   // `out` holds the verified object
  kMissing,  // not held (any more)
  kCorrupt,  // held, failed its check, deleted
  kFailed,   // the tier could not be read (I/O error, timeout); nothing deleted
};

struct ListedL2Object {
  store::ObjectKey key;
  std::uint64_t size_bytes = 0;  // what the tier holds for it (header included)
};
enum class L2Deletion : std::uint8_t { kDeleted, kLocked, kNotFound };

// The counters every adapter keeps (the list's kCounter members); CopyTo()
// copies them into a stats value, and the adapter measures the rest.
LMC_STATS_COUNTED(L2AdapterCounted, L2AdapterStats, LMC_L2_ADAPTER_OWN_STATS);
struct L2Counters : L2AdapterCounted {
  void CountLoad(L2LoadOutcome outcome, std::uint64_t bytes);
};

class L2Adapter {
 public:
  // One status per object: OK (stored, or already held), or why not.
  using StoreDone = std::function<void(std::vector<Status>)>;
  // One outcome per read.
  using LoadDone = std::function<void(std::vector<L2LoadOutcome>)>;
  // One flag per key of a lookup.
  using LookupDone = std::function<void(std::vector<bool>)>;
  // Objects the adapter dropped on its own.
  using RemovalObserver = std::function<void(std::span<const store::ObjectKey>)>;

  virtual ~L2Adapter() = default;

  // Once, before any other call: the L1 pool that every buffer handed to
  // the adapter lies in. An error refuses the configuration. The default
  // registers nothing.
  virtual Status AttachMemory(std::span<std::byte> pool);
  // Stores `objects`; `done` runs exactly once. The keys and bytes stay
  // valid until it has run.
  virtual void SubmitStore(std::span<const L2Write> objects, StoreDone done) = 0;
  // One flag per key: held now (and locked until Unlock).
  virtual std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) = 0;
  // The same, completing through `done` (exactly once; the keys stay valid
  // until it has run). `object_bytes` is the size every object of the
  // lookup has (a peer checks it against what it holds). The default runs
  // LookupAndLock on the caller's thread; an adapter whose answer comes from
  // elsewhere (a peer's reply) calls back from its own thread, so the
  // prefetch worker that asked goes on with other requests meanwhile.
  virtual void SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes,
                            LookupDone done);
  virtual void Unlock(std::span<const store::ObjectKey> keys) = 0;
  // Loads `reads`; `done` runs exactly once. The keys and buffers stay valid
  // until it has run.
  virtual void SubmitLoad(std::span<const L2Read> reads, LoadDone done) = 0;
  virtual L2AdapterStats Stats() const = 0;
  // True when Submit* returns before its completion has run (the device
  // completes on its own): the controllers then need no thread per call.
  virtual bool CompletesAsynchronously() const { return false; }
  // False for a source that is only read (the peers: what they hold is
  // theirs to store): the store controller hands it nothing.
  virtual bool TakesStores() const { return true; }
  // False for a source whose loads serve only the request that asked for
  // them (the peers with --p2p-keep-loaded false): the prefetch admits them
  // served once (store::ObjectTable::FinishWriteAndRead), not as our own.
  virtual bool KeepsLoadedObjects() const { return true; }
  // What a load from this adapter costs now (tier/load_cost.h), for the
  // load-or-recompute policy; null where nothing measures it (the metered
  // wrapper every configured adapter gets does).
  virtual LoadCostMeter* load_cost() { return nullptr; }
  // Where the adapter reports the objects it drops on its own (its
  // eviction, a corrupt object it deleted), for the KV event log; set once,
  // before any other call. The default drops nothing it could tell of (a
  // Redis Cluster evicts without telling its clients).
  virtual void ObserveRemovals(RemovalObserver observer) { (void)observer; }
  // Holds each tenant's objects in this tier to the quota `ledger` names
  // (store/tenant_ledger.h; it outlives the adapter), where the adapter
  // manages its own capacity (fs, mock); others ignore it. Set once, before
  // any other call.
  virtual void EnforceQuotas(const store::TenantLedger* ledger) { (void)ledger; }

  // Listing and deleting by key (GET and DELETE /cache/objects), where the
  // adapter keeps an index of what it holds (fs, mock); kNotSupported
  // otherwise. List: up to `limit` objects `keep` accepts (null: every one)
  // after `after` (null: from the first), in store::ListingLess order, with
  // their sizes in the tier. Delete: one outcome per key; an object a load
  // holds is left unless `force`.
  using KeyFilter = std::function<bool(const store::ObjectKey&)>;
  virtual Result<std::vector<ListedL2Object>> List(const store::ObjectKey* after,
                                                   std::size_t limit, const KeyFilter& keep) const {
    (void)after, (void)limit, (void)keep;
    return Status(ErrorCode::kNotSupported, "this adapter cannot list what it holds");
  }
  virtual Result<std::vector<L2Deletion>> Delete(std::span<const store::ObjectKey> keys,
                                                 bool force) {
    (void)keys, (void)force;
    return Status(ErrorCode::kNotSupported, "this adapter cannot delete by key");
  }

  // Submit and wait: for callers with a thread to spend (the write-behind
  // workers, tests).
  std::vector<Status> Store(std::span<const L2Write> objects);
  std::vector<L2LoadOutcome> Load(std::span<const L2Read> reads);
};

// An adapter that does its work on the caller's thread: it implements the
// blocking calls, and its completions run before Submit* returns.
class BlockingL2Adapter : public L2Adapter {
 public:
  void SubmitStore(std::span<const L2Write> objects, StoreDone done) final {
    done(StoreNow(objects));
  }
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) final { done(LoadNow(reads)); }

 protected:
  virtual std::vector<Status> StoreNow(std::span<const L2Write> objects) = 0;
  virtual std::vector<L2LoadOutcome> LoadNow(std::span<const L2Read> reads) = 0;
};

}  // namespace lmcache::tier
