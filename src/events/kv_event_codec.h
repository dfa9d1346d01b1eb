// The wire forms of KV events.
//
// * The reference's: KVEventPollResult / KVEventBatch and KVEventRecord
//   (lmcache/v1/multiprocess/custom_types.py), plain dataclasses that
//   msgspec encodes as maps of every field in declaration order:
//   {enabled, incarnation, next_cursor, lost, events: [{seq, kind, medium,
//   model_name, block_hashes: [bin], parent_block_hash: bin | nil,
//   token_ids: [int], block_size}]}, plus our `location` and `tenant`
//   (msgspec ignores fields a dataclass does not declare).
// * vLLM's (vllm/distributed/kv_events.py after its PR #42892): a batch
//   [ts: float64, events, data_parallel_rank: int | nil] of tagged maps
//   {"type": "BlockStored" | "BlockRemoved" | "AllBlocksCleared", ...}
//   with defaulted fields left out; a block hash is the low 64 bits of the
//   digest read big-endian (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, vLLM's
//   default), or the 32 bytes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "events/kv_event.h"
#include "events/kv_event_log.h"

namespace lmcache::events {

std::string EncodeKvEventPage(const KvEventPage& page);

enum class VllmHashFormat : std::uint8_t { kInt64, kBytes };

struct VllmBatchOptions {
  VllmHashFormat hashes = VllmHashFormat::kInt64;
  std::optional<std::int64_t> data_parallel_rank;  // nil when unset
};

// One KVEventBatch of `events` (each becomes one vLLM event).
std::string EncodeVllmBatch(std::span<const KvEvent* const> events, double timestamp,
                            const VllmBatchOptions& options);

// vLLM's integer form of a block hash: the digest's last 8 bytes, big-endian.
std::uint64_t VllmIntHash(const store::ChunkHash& hash);

}  // namespace lmcache::events
