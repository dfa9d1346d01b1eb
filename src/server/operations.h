// The operation table of the wire protocol: frozen integer ids, snake_case
// names, which thread pool runs each one and what a failed call answers.
//
// Ids 1-34 are the reference's frozen table (spec 2.4); they never change.
// Operations added by us (server_info, stats) have names only. A request's
// operation frame holds either the integer id or the name.
// Thread-safety: immutable tables; safe anywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "lmcache/protocol.h"

namespace lmcache::server {

using Op = lmcache::Op;

// Where a request runs (reference spec 16).
enum class Pool : std::uint8_t {
  kInline,    // on the loop thread: cheap, never blocks
  kAffinity,  // transfer pool, one queue per client identity (--max-gpu-workers)
  kCpu,       // general pool (--max-cpu-workers)
};

// What frame 3 carries when an operation fails (so reference clients degrade).
enum class FailureValue : std::uint8_t {
  kNil,
  kFalse,
  kZero,
  kEmptyList,
  kStoreRetrieveFailure,   // [b"", false]
  kEmptyPrepareStore,      // {"context": {"slots": [], "chunk_indices": []}}
  kFailedPrepareRetrieve,  // {"success": false, "data": b"", "context": {}}
  kFailedRegistration,     // {"shm_name": "", "pool_size": 0, "error": <message>}
};

struct OpSpec {
  Op op;
  std::string_view name;
  bool frozen_id;  // travels as an integer id in reference clients
  Pool pool;
  std::uint8_t min_payloads;
  std::uint8_t max_payloads;
  FailureValue failure;
};

// The spec of an operation given by integer id (1-34) or by name; nullopt if unknown.
// "finish_read" is accepted as a name of commit_retrieve (the original design's name).
std::optional<OpSpec> FindOpById(std::int64_t id);
std::optional<OpSpec> FindOpByName(std::string_view name);
const OpSpec& SpecOf(Op op);

}  // namespace lmcache::server
