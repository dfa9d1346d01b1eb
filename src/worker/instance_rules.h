// InstanceRules: the rules of registered instances that the server's transfer
// families share (server/transfer_ops, server/gpu_ops) and the service's
// connection and reaper events use: who may transfer for an instance, which objects a
// worker's transfer names, whether a registration is acceptable, and the
// release of everything a registration left when it goes.
//
// Thread-safety: every method may be called from any thread (the registry,
// the table and the hasher are internally synchronised); listeners are added
// before serving, draining is an atomic flag.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "events/token_bindings.h"
#include "lmcache/status.h"
#include "store/chunk_sizes.h"
#include "store/l1_cache.h"
#include "worker/chunk_hasher.h"
#include "worker/instances.h"
#include "worker/key_rules.h"

namespace lmcache::worker {

// The objects one worker's transfer names: chunks [start, end) on its own rank.
// What a transfer's keys are resolved for: a store also binds its chunks'
// tokens for the KV events (events/token_bindings.h).
enum class KeyUse : std::uint8_t { kRead, kStore };

struct WorkerKeys {
  InstanceInfo instance;
  std::vector<store::ObjectKey> keys;
  std::string transfer;  // names the transfer among the instance's pending ones
};

class InstanceRules {
 public:
  // Every pointer must outlive this object; `bindings` may be null (no KV
  // events).
  InstanceRules(InstanceRegistry* instances, store::L1Cache* l1, ChunkHasher* hasher,
                const store::ChunkSizes* chunk_sizes, events::TokenBindings* bindings);

  // Called with a registration's serial when it goes (unregister, the
  // reaper, a re-registration from another connection, its connection
  // closing), after its leases were released; transfer modes drop what they
  // hold for it. Added before serving; must not block.
  void AddListener(std::function<void(std::uint64_t registration)> listener) {
    listeners_.push_back(std::move(listener));
  }
  // While draining (SIGTERM), new registrations are refused; registered
  // workers are served until they leave.
  void set_draining(bool draining) { draining_.store(draining, std::memory_order_release); }
  bool draining() const { return draining_.load(std::memory_order_acquire); }

  // The registration of `instance_id` that `connection` (the transport's
  // opaque id of the asking client) made (see InstanceRegistry::Authorize).
  Result<InstanceInfo> Authorize(std::int64_t instance_id, std::string_view connection);
  // The objects of a worker's transfer: its rank, chunks [start, end) at
  // its registered layout's chunk size.
  Result<WorkerKeys> ResolveWorkerKeys(const IpcKey& key, const InstanceInfo& instance, KeyUse use);
  // The object layout of an engine-driven registration at its model's chunk
  // size, checked: the registrant (below), and one chunk fits L1.
  Result<ChunkLayout> CheckRegistration(const EngineContext& engine, std::string_view connection,
                                        std::string_view endpoint_model);
  // Model name, world size, the model's chunk size the one its endpoint
  // advertises (`endpoint_model`: RequestContext's; store::ChunkSizes), and
  // not draining (unless the connection re-registers).
  Status CheckRegistrant(const EngineContext& engine, std::string_view connection,
                         std::string_view endpoint_model);
  // One object of `layout` fits in L1.
  Status CheckFits(const ChunkLayout& layout);
  // Unregisters on behalf of the connection that registered it and releases
  // what it left; an unknown instance is only logged (as the reference).
  Status Unregister(std::int64_t instance_id, std::string_view connection);
  // Releases everything a registration left behind (pending writes are
  // aborted, never published; pending reads released), logging `why`.
  void ReleaseInstance(const RemovedInstance& removed, ReleaseCause cause);
  // Registrations ended since start, by ReleaseCause.
  std::array<std::uint64_t, kReleaseCauses> ReleasedCounts() const;

 private:
  InstanceRegistry* const instances_;
  store::L1Cache* const l1_;
  ChunkHasher* const hasher_;
  const store::ChunkSizes* const chunk_sizes_;
  events::TokenBindings* const bindings_;
  std::atomic<bool> draining_{false};
  std::array<std::atomic<std::uint64_t>, kReleaseCauses> released_{};
  std::vector<std::function<void(std::uint64_t)>> listeners_;
};

}  // namespace lmcache::worker
