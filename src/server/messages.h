// The typed payloads of the wire protocol, as decoded from msgpack frames.
//
// Field names and defaults are the reference's (spec 4.1, 4.2); the codec
// fills these from name-keyed maps, ignoring unknown keys and defaulting
// missing optional fields.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lmcache::server {

// IPCCacheServerKey (spec 4.1).
struct IpcKey {
  std::string model_name;
  std::int64_t world_size = 0;
  std::optional<std::int64_t> worker_id;  // nullopt: scheduler-side (all ranks)
  std::vector<std::uint32_t> token_ids;   // the whole prompt
  std::int64_t start = 0;                 // chunk-aligned token range [start, end)
  std::int64_t end = 0;
  std::string request_id;  // session key; not part of the identity
  std::string cache_salt;
  std::int64_t num_kv_readers = 0;  // 0 = not sent (rejected by lookup)
};

// RegisterEngineDrivenContextPayload (spec 4.2), single-group core.
struct RegisterContextPayload {
  std::int64_t instance_id = 0;
  std::string model_name;
  std::int64_t world_size = 0;
  std::int64_t block_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t hidden_dim_size = 0;
  std::string dtype_str;
  bool use_mla = false;
};

}  // namespace lmcache::server
