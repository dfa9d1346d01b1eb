// TransferPlan: which blocks a store or retrieve copies, per chunk and KV
// group, from the block ids a worker sent (spec 10.1-10.3), checked before
// anything is locked or queued.
//
// block_ids holds one list per KV group, covering the key's [start, end):
// block i of a group holds the group's tokens start + i * block_size ....
// A chunk of a group is its chunk_tokens / block_size blocks; the group's
// part of the object keeps its last `slots` tokens (all of them, or the
// window of a sliding-window group shorter than a chunk).
//   store:    every group's part of every chunk is gathered; a chunk whose
//             parts would read the engine's null block (vLLM's block 0: a
//             freed, out-of-window block) holds no valid KV and is left out
//             (not stored), as the reference leaves out all-null chunks.
//   retrieve: a group's part is scattered only into chunks its window
//             reaches from the end of the range (a sliding-window group needs
//             only the last `window` tokens), never into the first
//             floor(skip_first_n_tokens / block_size) blocks (whole blocks,
//             per group), and never into the null block.
// A list too short for the range, or an id outside the cache (other than the
// null block), fails closed.
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu/kv_layout.h"
#include "lmcache/status.h"
#include "protocol/gpu_messages.h"

namespace lmcache::gpu {

struct GroupCopy {
  std::size_t group = 0;
  std::vector<std::int32_t> block_ids;  // one per block of the part's tokens; -1: left alone
  std::int64_t skip_tokens = 0;         // retrieve: the part's leading tokens left alone
};

struct ChunkPlan {
  std::size_t chunk = 0;  // index of the chunk in the transfer's range
  std::vector<GroupCopy> groups;
};

// Every group's list covers `chunks` chunks with ids of its cache.
Status CheckBlockIds(const KvLayout& layout, std::int64_t chunks, const protocol::GroupBlockIds& ids);

// The chunks a store gathers (those with no null block in any part), in order.
std::vector<ChunkPlan> PlanStore(const KvLayout& layout, const protocol::GroupBlockIds& ids,
                                 std::int64_t chunks);

// One plan per chunk of the range, in order; a chunk may copy no group.
std::vector<ChunkPlan> PlanRetrieve(const KvLayout& layout, const protocol::GroupBlockIds& ids,
                                    std::int64_t chunks, std::int64_t skip_tokens);

}  // namespace lmcache::gpu
