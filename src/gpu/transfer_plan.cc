#include "gpu/transfer_plan.h"

#include <algorithm>
#include <string>

namespace lmcache::gpu {
namespace {

std::int64_t BlocksPerChunk(const KvLayout& layout, const KvGroupLayout& g) {
  return layout.chunk_tokens / g.paged.block_size;
}

bool IsNull(const KvGroupLayout& g, std::int32_t id) { return g.null_block && id == *g.null_block; }

// The blocks of chunk `chunk` that group `g`'s part keeps.
std::vector<std::int32_t> PartBlocks(const KvLayout& layout, const KvGroupLayout& g,
                                     const std::vector<std::int32_t>& ids, std::int64_t chunk) {
  const std::int64_t per_chunk = BlocksPerChunk(layout, g);
  const std::int64_t kept = g.slots / g.paged.block_size;
  const auto first = ids.begin() + chunk * per_chunk + (per_chunk - kept);
  return std::vector<std::int32_t>(first, first + kept);
}

}  // namespace

Status CheckBlockIds(const KvLayout& layout, std::int64_t chunks, const protocol::GroupBlockIds& ids) {
  if (ids.size() != layout.groups.size()) {
    return InvalidArgument("block_ids holds " + std::to_string(ids.size()) + " lists for the " +
                  std::to_string(layout.groups.size()) + " KV groups registered");
  }
  for (std::size_t n = 0; n < ids.size(); ++n) {
    const KvGroupLayout& g = layout.groups[n];
    const std::string group = layout.groups.size() == 1 ? "" : " of KV group " + std::to_string(n);
    const std::int64_t needed = chunks * BlocksPerChunk(layout, g);
    if (static_cast<std::int64_t>(ids[n].size()) < needed) {
      return InvalidArgument(std::to_string(chunks * layout.chunk_tokens) + " tokens need " +
                    std::to_string(needed) + " block ids of " + std::to_string(g.paged.block_size) +
                    " tokens" + group + "; got " + std::to_string(ids[n].size()));
    }
    for (std::int64_t i = 0; i < needed; ++i) {
      const std::int32_t id = ids[n][i];
      if (!IsNull(g, id) && (id < 0 || id >= g.paged.num_blocks)) {
        return InvalidArgument("block id " + std::to_string(id) + group + " is outside the cache's " +
                      std::to_string(g.paged.num_blocks) + " blocks");
      }
    }
  }
  return Status::Ok();
}

std::vector<ChunkPlan> PlanStore(const KvLayout& layout, const protocol::GroupBlockIds& ids,
                                 std::int64_t chunks) {
  std::vector<ChunkPlan> plans;
  for (std::int64_t c = 0; c < chunks; ++c) {
    ChunkPlan plan;
    plan.chunk = static_cast<std::size_t>(c);
    bool complete = true;
    for (std::size_t n = 0; n < layout.groups.size() && complete; ++n) {
      const KvGroupLayout& g = layout.groups[n];
      std::vector<std::int32_t> blocks = PartBlocks(layout, g, ids[n], c);
      complete = std::none_of(blocks.begin(), blocks.end(), [&](std::int32_t id) { return IsNull(g, id); });
      plan.groups.push_back({n, std::move(blocks), 0});
    }
    if (complete) plans.push_back(std::move(plan));
  }
  return plans;
}

std::vector<ChunkPlan> PlanRetrieve(const KvLayout& layout, const protocol::GroupBlockIds& ids,
                                    std::int64_t chunks, std::int64_t skip_tokens) {
  const std::int64_t chunk_tokens = layout.chunk_tokens;
  std::vector<ChunkPlan> plans(static_cast<std::size_t>(chunks));
  for (std::int64_t c = 0; c < chunks; ++c) {
    plans[c].chunk = static_cast<std::size_t>(c);
    for (std::size_t n = 0; n < layout.groups.size(); ++n) {
      const KvGroupLayout& g = layout.groups[n];
      // The window reaches back from the end of the range: chunks wholly before it are not needed.
      if (g.window_tokens > 0 && (c + 1) * chunk_tokens + g.window_tokens <= chunks * chunk_tokens) continue;
      const std::int64_t skip = skip_tokens / g.paged.block_size * g.paged.block_size;
      const std::int64_t in_chunk = std::clamp<std::int64_t>(skip - c * chunk_tokens, 0, chunk_tokens);
      const std::int64_t in_part = std::clamp<std::int64_t>(in_chunk - g.first_kept_token(chunk_tokens), 0, g.slots);
      if (in_part == g.slots) continue;
      std::vector<std::int32_t> blocks = PartBlocks(layout, g, ids[n], c);
      for (std::int32_t& id : blocks) {
        if (IsNull(g, id)) id = -1;
      }
      plans[c].groups.push_back({n, std::move(blocks), in_part});
    }
  }
  return plans;
}

}  // namespace lmcache::gpu
