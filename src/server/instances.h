// InstanceRegistry: the registered engine-driven contexts (workers), their
// layouts, liveness and pending transfers.
//
// A worker registers its instance id with a chunk layout (model, world size,
// layers, hidden size, dtype, MLA). One (model, world size) pair has one
// layout: a second instance, or the same one re-registering, with another
// geometry is refused (kLayoutMismatch) instead of serving mismatched bytes.
// Every request an instance makes refreshes its liveness. Pending writes
// (prepare_store without commit) and reads (prepare_retrieve without commit)
// are recorded per (instance, transfer key) so unregister and the reaper can
// release them at once.
//
// Thread-safety: internally synchronised (one mutex; the registry holds small
// maps and its methods do no I/O). Lock order: it calls nothing while holding
// its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "lmcache/status.h"
#include "server/messages.h"
#include "store/object_key.h"

namespace lmcache::server {

// The bytes of one object (one chunk of one KV shard) and their tensor shape.
struct ChunkLayout {
  std::int64_t num_layers = 0;
  std::int64_t hidden_dim = 0;
  std::int64_t chunk_size = 0;
  std::string dtype;  // torch name without "torch.", e.g. "bfloat16"
  bool use_mla = false;
  std::vector<std::int64_t> shape;  // [2, L, chunk, hidden] or, for MLA, [L, chunk, hidden]
  std::uint64_t object_bytes = 0;   // prod(shape) * itemsize

  bool SameGeometry(const ChunkLayout& other) const {
    return num_layers == other.num_layers && hidden_dim == other.hidden_dim &&
           chunk_size == other.chunk_size && dtype == other.dtype && use_mla == other.use_mla;
  }
  std::string Describe() const;
};

// Bytes per element of a torch dtype name ("bfloat16", "float16", "half", ...).
Result<std::uint32_t> DtypeItemSize(const std::string& dtype);
Result<ChunkLayout> MakeChunkLayout(const RegisterContextPayload& payload, std::int64_t chunk_size);

struct InstanceInfo {
  std::int64_t instance_id = 0;
  std::string model_name;
  std::int64_t world_size = 0;
  ChunkLayout layout;
};

// Pending transfers of one instance, keyed by a transfer key (see service).
using PendingMap = std::map<std::string, std::vector<store::ObjectKey>>;

struct RemovedInstance {
  InstanceInfo info;
  PendingMap pending_writes;
  PendingMap pending_reads;
};

class InstanceRegistry {
 public:
  explicit InstanceRegistry(const Clock* clock);

  // Registers (or refreshes, when already registered with the same layout).
  // Returns true when the instance is new.
  Result<bool> Register(const RegisterContextPayload& payload, const ChunkLayout& layout)
      LMC_EXCLUDES(mu_);
  std::optional<RemovedInstance> Unregister(std::int64_t instance_id) LMC_EXCLUDES(mu_);
  // The instance's registration, refreshing its liveness; kNotRegistered if unknown.
  Result<InstanceInfo> Touch(std::int64_t instance_id) LMC_EXCLUDES(mu_);
  // The layout registered for (model, world size), if any instance registered it.
  std::optional<ChunkLayout> LayoutOf(const std::string& model, std::int64_t world_size) const
      LMC_EXCLUDES(mu_);

  void AddPendingWrite(std::int64_t instance_id, const std::string& transfer,
                       std::vector<store::ObjectKey> keys) LMC_EXCLUDES(mu_);
  std::optional<std::vector<store::ObjectKey>> TakePendingWrite(std::int64_t instance_id,
                                                                const std::string& transfer)
      LMC_EXCLUDES(mu_);
  void AddPendingRead(std::int64_t instance_id, const std::string& transfer,
                      std::vector<store::ObjectKey> keys) LMC_EXCLUDES(mu_);
  std::optional<std::vector<store::ObjectKey>> TakePendingRead(std::int64_t instance_id,
                                                               const std::string& transfer)
      LMC_EXCLUDES(mu_);

  // Instances silent for longer than `timeout_ms` (if they ever sent a request
  // after registering) or `grace_ms` (if they never did).
  std::vector<std::int64_t> Silent(TimeMs timeout_ms, TimeMs grace_ms) const LMC_EXCLUDES(mu_);
  std::size_t size() const LMC_EXCLUDES(mu_);
  std::size_t pending_writes() const LMC_EXCLUDES(mu_);
  std::size_t pending_reads() const LMC_EXCLUDES(mu_);

 private:
  struct Instance {
    InstanceInfo info;
    TimeMs last_seen_ms = 0;
    bool heard_since_registration = false;
    PendingMap pending_writes;
    PendingMap pending_reads;
  };
  struct LayoutRef {
    ChunkLayout layout;
    int refs = 0;
  };
  using LayoutKey = std::pair<std::string, std::int64_t>;

  const Clock* const clock_;
  mutable Mutex mu_;
  std::map<std::int64_t, Instance> instances_ LMC_GUARDED_BY(mu_);
  std::map<LayoutKey, LayoutRef> layouts_ LMC_GUARDED_BY(mu_);
};

}  // namespace lmcache::server
