// InstanceRegistry: the registered engine-driven contexts (workers), their
// layouts, the connection each was registered from, liveness and pending
// transfers.
//
// A worker registers its instance id with a chunk layout (model, world size,
// layers, hidden size, dtype, MLA) over one connection. One (model, world
// size) pair has one layout: another geometry is refused (kLayoutMismatch)
// instead of serving mismatched bytes. Operations that name an instance are
// accepted only from the connection that registered it (kPermissionDenied
// otherwise). The same instance id registered from a new connection is a new
// process (the old one crashed and restarted): the old registration is
// removed, and handed back so its leases are released at once.
//
// Every registration gets a serial, the owner id of its leases. Pending
// transfers (a prepare without its commit) hold lease ids, recorded under
// (registration, transfer key). A record is accepted only while that exact
// registration is current: this is the one lock that orders a prepare
// against unregister, so a prepare that loses the race fails and releases
// what it reserved, and nothing is left behind.
//
// Thread-safety: internally synchronised (one mutex, a leaf: it calls nothing
// while holding it; lease releases happen in the caller, outside).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "lmcache/messages.h"
#include "lmcache/status.h"
#include "store/owner.h"
#include "worker/worker_stats.h"

namespace lmcache::worker {

// "unregistered", "disconnected", "reaped", "replaced": the stats and metric labels.
const char* ReleaseCauseName(ReleaseCause cause);

// One tensor of an object: an object holds its parts back to back (a GPU
// registration of several KV groups has one part per group).
struct ObjectPart {
  std::vector<std::int64_t> shape;
  std::string dtype;
  bool operator==(const ObjectPart&) const = default;
};

// The bytes of one object (one chunk of one KV shard) and their tensor shape.
struct ChunkLayout {
  std::int64_t num_layers = 0;      // the first part's (engine-driven: the only one)
  std::int64_t hidden_dim = 0;
  std::int64_t chunk_size = 0;
  std::string dtype;  // torch name without "torch.", e.g. "bfloat16"
  bool use_mla = false;
  std::vector<std::int64_t> shape;  // [2, L, chunk, hidden] or, for MLA, [L, chunk, hidden]
  std::vector<ObjectPart> parts;    // every part, in order
  std::uint64_t object_bytes = 0;   // the parts' bytes together
  // The object keys' layout namespace (store/object_key.h): 0 for the
  // reference's layouts, which the engine-driven path and split-format GPU
  // registrations share.
  std::uint32_t object_namespace = 0;

  bool SameGeometry(const ChunkLayout& other) const {
    return chunk_size == other.chunk_size && parts == other.parts &&
           object_namespace == other.object_namespace;
  }
  std::string Describe() const;
};

// Bytes per element of a torch dtype name ("bfloat16", "float16", "half", ...).
Result<std::uint32_t> DtypeItemSize(const std::string& dtype);
Result<ChunkLayout> MakeChunkLayout(const EngineContext& context, std::int64_t chunk_size);

struct InstanceInfo {
  std::int64_t instance_id = 0;
  std::uint64_t registration = 0;  // serial of this registration
  std::string model_name;
  std::int64_t world_size = 0;
  ChunkLayout layout;
  store::Owner owner() const { return store::Owner::Instance(registration); }
};

// What a registration left behind when it went: the leases its pending
// transfers hold (the caller releases them).
struct RemovedInstance {
  InstanceInfo info;
  std::vector<store::LeaseId> writes;
  std::vector<store::LeaseId> reads;
};

// A prepare_store waiting for its commit: its write lease and how many
// objects it staged (so a commit can tell when some were lost meanwhile).
struct PendingWrite {
  store::LeaseId lease = store::kNoLease;
  std::size_t objects = 0;
};

struct RegisterOutcome {
  InstanceInfo info;
  bool is_new = false;                     // false: the same connection registered again
  std::optional<RemovedInstance> replaced;  // the same id's registration from another connection
};

// A registration carried across a takeover (docs/architecture.md, "Restarts
// and upgrades"): the successor holds it for no connection until the worker's
// first request claims it, so an engine-driven worker keeps its mapping of
// the same segment and does not re-register.
struct CarriedRegistration {
  std::int64_t instance_id = 0;
  std::string model_name;
  std::int64_t world_size = 0;
  ChunkLayout layout;
};

class InstanceRegistry {
 public:
  // At most `max_pending` pending transfers per instance and kind.
  InstanceRegistry(const Clock* clock, std::size_t max_pending = 16384);

  Result<RegisterOutcome> Register(const EngineContext& context, const ChunkLayout& layout,
                                   std::string_view connection) LMC_EXCLUDES(mu_);
  // The instance's registration if `connection` made it, refreshing its
  // liveness: kNotRegistered if unknown, kPermissionDenied if another
  // connection registered it.
  Result<InstanceInfo> Authorize(std::int64_t instance_id, std::string_view connection)
      LMC_EXCLUDES(mu_);
  // A heartbeat: true (and liveness refreshed) when `connection` holds the registration.
  bool Heartbeat(std::int64_t instance_id, std::string_view connection) LMC_EXCLUDES(mu_);
  // Unregisters on behalf of the connection that registered it.
  Result<RemovedInstance> Unregister(std::int64_t instance_id, std::string_view connection)
      LMC_EXCLUDES(mu_);
  // Unregisters whoever holds it (the reaper).
  std::optional<RemovedInstance> Remove(std::int64_t instance_id) LMC_EXCLUDES(mu_);
  // Unregisters every instance `connection` registered (it closed).
  std::vector<RemovedInstance> RemoveConnection(std::string_view connection) LMC_EXCLUDES(mu_);
  // The layout registered for (model, world size), if any instance registered it.
  std::optional<ChunkLayout> LayoutOf(const std::string& model, std::int64_t world_size) const
      LMC_EXCLUDES(mu_);
  // The dtype of the objects of `model` in layout namespace `object_namespace`
  // that are `object_bytes` long, as the registrations bound it; nullopt
  // when none matches, when their parts are of several dtypes, or when two
  // registrations disagree (a serde then stores the object raw).
  std::optional<std::string> ElementDtypeOf(const std::string& model,
                                            std::uint32_t object_namespace,
                                            std::uint64_t object_bytes) const LMC_EXCLUDES(mu_);

  // Records a prepare_store under (registration, transfer). Fails with
  // kNotRegistered when that registration is no longer current. A write
  // recorded earlier for the same transfer is returned (replaced).
  Result<std::optional<PendingWrite>> AddPendingWrite(const InstanceInfo& instance,
                                                      const std::string& transfer,
                                                      PendingWrite write) LMC_EXCLUDES(mu_);
  std::optional<PendingWrite> TakePendingWrite(const InstanceInfo& instance,
                                               const std::string& transfer) LMC_EXCLUDES(mu_);
  // Records the read lease of a prepare_retrieve; several may wait for the
  // same transfer, and commits take them in the order they were made.
  Status AddPendingRead(const InstanceInfo& instance, const std::string& transfer,
                        store::LeaseId lease) LMC_EXCLUDES(mu_);
  std::optional<store::LeaseId> TakePendingRead(const InstanceInfo& instance,
                                                const std::string& transfer) LMC_EXCLUDES(mu_);

  // The registrations a successor carries over, but those `bound` says hold
  // state of this process (pending transfers are not carried: they end with
  // the handover). `bound` runs with no lock of the registry held.
  std::vector<CarriedRegistration> Carry(
      const std::function<bool(std::uint64_t registration)>& bound = nullptr) const
      LMC_EXCLUDES(mu_);
  // Holds `carried` for no connection: the first connection that names the
  // instance (Authorize, Heartbeat, Unregister) claims it, and a registration
  // from any connection replaces it. One that no request claims goes with the
  // reaper's grace. Fails on a second registration of an id or a layout that
  // contradicts one adopted before.
  Status Adopt(const CarriedRegistration& carried) LMC_EXCLUDES(mu_);

  // Instances silent for longer than `timeout_ms` (if they ever sent a request
  // after registering) or `grace_ms` (if they never did).
  std::vector<std::int64_t> Silent(TimeMs timeout_ms, TimeMs grace_ms) const LMC_EXCLUDES(mu_);
  std::vector<InstanceInfo> List() const LMC_EXCLUDES(mu_);
  RegistryCounts Counts() const LMC_EXCLUDES(mu_);
  std::size_t size() const LMC_EXCLUDES(mu_) { return Counts().instances; }

 private:
  struct Instance {
    InstanceInfo info;
    std::string connection;
    TimeMs last_seen_ms = 0;
    bool heard_since_registration = false;
    std::map<std::string, PendingWrite> pending_writes;
    std::map<std::string, std::deque<store::LeaseId>> pending_reads;
    std::size_t pending_read_count = 0;
  };
  struct LayoutRef {
    ChunkLayout layout;
    int refs = 0;
  };
  using LayoutKey = std::pair<std::string, std::int64_t>;

  // The instance `connection` holds, claiming a carried one nobody holds.
  Result<std::map<std::int64_t, Instance>::iterator> HeldByLocked(std::int64_t instance_id,
                                                                  std::string_view connection)
      LMC_REQUIRES(mu_);
  RemovedInstance RemoveLocked(std::map<std::int64_t, Instance>::iterator it) LMC_REQUIRES(mu_);
  // The instance if `registration` is still its current one.
  Instance* CurrentLocked(const InstanceInfo& instance) LMC_REQUIRES(mu_);

  const Clock* const clock_;
  const std::size_t max_pending_;
  std::atomic<std::uint64_t> next_registration_{1};
  mutable Mutex mu_;
  std::map<std::int64_t, Instance> instances_ LMC_GUARDED_BY(mu_);
  std::map<LayoutKey, LayoutRef> layouts_ LMC_GUARDED_BY(mu_);
};

}  // namespace lmcache::worker
