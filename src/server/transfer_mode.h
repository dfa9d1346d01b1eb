// TransferMode: one way a worker's KV bytes move between its memory and L1,
// as one registered thing. Two exist: the engine-driven shared-memory path
// (TransferOps, "engine_driven": the worker copies through the pool) and the
// lmcache-driven CUDA-IPC path (GpuOps, "lmcache_driven": the server copies
// between the worker's GPU and L1). A mode owns its operations, the features
// it announces in server_info, what it holds for a registration, its share
// of the stats and of health. Its heavy parts (a device backend, its
// threads) are made at first use, so a server no GPU client talks to runs
// none of them.
//
// --supported-transfer-mode picks the modes that serve (auto: every one); a
// mode that does not serve still answers its operations, each with its
// failure value and an error naming the flag, so every request gets a reply
// of the type its client decodes.
//
// Thread-safety: AddTo runs once, before serving; the other members may be
// called from any thread (see each implementation).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "worker/instances.h"
#include "worker/lookup_leases.h"
#include "server/op_table.h"
#include "worker/instance_rules.h"
#include "server/reserve_or_park.h"
#include "server/service_config.h"
#include "server/stats.h"
#include "shm/shm_segment.h"
#include "store/object_table.h"

namespace lmcache::server {

// What a transfer mode uses of the service, and nothing else: each must
// outlive the mode.
struct TransferDeps {
  const ServiceConfig& config;
  const std::string& boot_id;
  shm::ShmSegment& pool;  // the L1 pool's segment (its name, size, bytes)
  store::ObjectTable& table;
  worker::InstanceRegistry& instances;
  worker::InstanceRules& instance_rules;
  worker::LookupLeases& leases;  // a retrieve takes over its lookup's locks
  StoreParking parking;  // a store waiting for pre-faulted pages
};

class TransferMode {
 public:
  explicit TransferMode(bool serving) : serving_(serving) {}
  virtual ~TransferMode() = default;

  // The mode's name as --supported-transfer-mode spells it.
  virtual std::string_view name() const = 0;
  // What server_info lists under "features" while the mode serves.
  virtual std::vector<std::string> features() const = 0;
  // Adds the mode's operations (refusals where the mode does not serve).
  virtual void AddTo(OpTable* table) = 0;
  // A registration went: drop what the mode holds for it, without waiting.
  virtual void OnRegistrationGone(std::uint64_t registration) { (void)registration; }
  // The mode's figures in a stats snapshot.
  virtual void AddStats(StatsSnapshot* stats) const { (void)stats; }
  // True when the registration holds state of this process that a successor
  // cannot inherit (device mappings): it is not carried across a takeover.
  virtual bool BoundToProcess(std::uint64_t registration) const {
    (void)registration;
    return false;
  }
  // A fault health reports (not ready), or nullopt.
  virtual std::optional<std::string> Problem() const { return std::nullopt; }

  bool serving() const { return serving_; }

 protected:
  // Adds `spec` with `handler`, or with a refusal naming the flag where the mode does not serve.
  void AddOp(OpTable* table, const OpSpec& spec, Handler handler) const;

 private:
  const bool serving_;
};

// Whether --supported-transfer-mode `setting` lets mode `name` serve.
bool ModeServes(std::string_view setting, std::string_view name);

}  // namespace lmcache::server
