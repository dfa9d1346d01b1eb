// lmcache/messages.h: the typed payloads of the wire protocol.
//
// These are the values that cross the process boundary, declared once and
// used by the server, the client library, the tests and the benchmarks; the
// codec (src/protocol/wire_codec.h) turns them into msgpack frames and back.
// Field names are the reference's (LMCache MP, spec 4.1, 4.2, 11.3): maps are
// keyed by field name, unknown keys are ignored and missing optional fields
// take their defaults. The defaults below are the ones a client library user
// wants; where the wire's default differs (a field the reference requires, or
// one an old client does not send) the decoder applies the wire's rule.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lmcache {

// IPCCacheServerKey (spec 4.1): a chunk-aligned range of one prompt.
struct IpcKey {
  std::string model_name;
  std::int64_t world_size = 1;
  // This worker's KV rank for transfers; nullopt (msgpack nil) for the
  // scheduler's lookups, which cover every rank.
  std::optional<std::int64_t> worker_id = 0;
  std::vector<std::uint32_t> token_ids;  // the whole prompt
  std::int64_t start = 0;                // token range [start, end), multiples of the chunk size
  std::int64_t end = 0;
  std::string request_id;  // the session; not part of the objects' identity
  std::string cache_salt;  // per-tenant isolation: part of every object key
  // Workers that will retrieve each object (MLA shares one object between TP
  // ranks). On the wire a missing field means 0, which lookups refuse.
  std::int64_t num_kv_readers = 1;
  // Request tags: the "lmcache.tag.<name>": "<value>" entries of the key's
  // request_configs (its other entries are metadata and ignored). Part of
  // every object's identity: a tagged and an untagged store of the same
  // tokens never share an object.
  std::map<std::string, std::string> tags;
  // The reference's per-request load controls (its kv_load_policy design),
  // also entries of request_configs. Metadata, never identity: they change
  // what a lookup does, not which objects match.
  //   "lmcache.skip_load": true: the lookup answers a miss and neither
  //     locks nor loads anything (the engine recomputes the prompt).
  //   "lmcache.hint.engine_computed_tokens": the prompt tokens the engine
  //     already holds in its own prefix cache (vLLM's connector sends it with
  //     its scheduler-time lookup): the whole chunks among them still count
  //     as hits where the cache has them, but are neither locked nor loaded
  //     from L2, as no worker will retrieve them.
  bool skip_load = false;
  std::optional<std::int64_t> engine_computed_tokens;
};

// RegisterEngineDrivenContextPayload (spec 4.2), its single-group core.
struct EngineContext {
  std::int64_t instance_id = 0;
  std::string model_name;
  std::int64_t world_size = 1;
  std::int64_t block_size = 16;
  std::int64_t num_layers = 0;
  std::int64_t hidden_dim_size = 0;
  std::string dtype_str = "bfloat16";  // torch dtype name, without "torch."
  bool use_mla = false;
};

// RegisterEngineDrivenContextResponse, plus our fields.
struct Registration {
  std::string shm_name;       // "" when the server offers no pool
  std::uint64_t pool_size = 0;
  std::string boot_id;        // ours: changes at every server start
  std::uint64_t object_bytes = 0;  // ours: the slot length of this layout
  std::optional<std::string> error;
};

// One object's place in the pool (spec 11.3): `length` is the unpadded size.
struct SlotDescriptor {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::vector<std::int64_t> shape;
  std::string dtype;
};

// PrepareStoreResponse: slots[i] is chunk chunk_indices[i] of the key's range.
struct PrepareStoreReply {
  std::vector<SlotDescriptor> slots;
  std::vector<std::uint64_t> chunk_indices;
  std::uint64_t oom_chunks = 0;  // ours: chunks that found no memory
};

// PrepareRetrieveResponse (the shared-memory form: data is always empty).
struct PrepareRetrieveReply {
  bool success = false;
  std::vector<SlotDescriptor> slots;
};

}  // namespace lmcache
