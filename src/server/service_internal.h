// Private helpers shared by the service's source files. Not for use elsewhere.
// Thread-safety: plain values and stateless helpers.
#pragma once

#include <string>
#include <vector>

#include "server/service.h"

namespace lmcache::server {

// The objects one worker's request names: chunks [start, end) on its own rank.
struct Service::WorkerKeys {
  InstanceInfo instance;
  std::vector<store::ObjectKey> keys;
  std::string transfer;  // names the transfer in the pending maps (key identity minus request_id)
};

// Owner id of an instance's leases.
inline store::OwnerId InstanceOwner(std::int64_t instance_id) {
  return static_cast<store::OwnerId>(instance_id) & ~(store::OwnerId{1} << 63);
}

// Owner id of a lookup's leases (the scheduler is no registered instance, so
// its locks belong to the request's session). The top bit keeps them apart
// from instance owners.
store::OwnerId SessionOwner(const std::string& request_id);

// Object keys of chunks [0, hashes.size()) for every rank in `ranks`,
// chunk-major and rank-minor (spec 5.5).
std::vector<store::ObjectKey> ExpandKeys(const std::vector<store::ChunkHash>& hashes,
                                         const std::string& model, const std::string& salt,
                                         const std::vector<std::int64_t>& kv_ranks);

// kv_rank of every worker of a world.
std::vector<std::int64_t> AllRanks(std::int64_t world_size);

}  // namespace lmcache::server
