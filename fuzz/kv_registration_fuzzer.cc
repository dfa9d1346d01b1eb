// libFuzzer target: register_kv_cache as a whole, from its frames (each
// wrapper a pickle or the msgpack map form) to the layout the server would
// copy with and the blocks a transfer would touch. Input: fuzz_input.h's
// format; byte 0 picks the chunk size, byte 1 the chunks and skip of a
// transfer; the frames are register_kv_cache's seven, then a block_ids frame.
// Beyond "no crash, no sanitizer report, no hang": a registration that is
// accepted has every layer's view inside the storage it names, objects whose
// parts add up, and plans that only name blocks of the cache (or -1, left
// alone).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz_input.h"
#include "gpu/kv_layout.h"
#include "gpu/transfer_plan.h"
#include "protocol/gpu_messages.h"

namespace {

using namespace lmcache;

void Check(bool condition) {
  if (!condition) std::abort();
}

void CheckLayout(const gpu::KvLayout& layout) {
  std::uint64_t parts = 0;
  for (const gpu::KvGroupLayout& g : layout.groups) {
    Check(g.object_offset == parts);
    parts += g.part_bytes();
    Check(g.slots > 0 && g.slots <= layout.chunk_tokens && layout.chunk_tokens % g.paged.block_size == 0);
    for (const gpu::LayerRef& l : g.layers) {
      const protocol::DeviceIpcWrapper& t = layout.tensors[l.tensor];
      Check(l.first_byte >= t.first_byte() && t.end_byte() <= t.storage_byte_offset + t.storage_bytes);
    }
  }
  Check(parts == layout.object_bytes);
}

void CheckPlans(const gpu::KvLayout& layout, const std::vector<gpu::ChunkPlan>& plans, bool retrieve) {
  for (const gpu::ChunkPlan& plan : plans) {
    for (const gpu::GroupCopy& part : plan.groups) {
      const gpu::KvGroupLayout& g = layout.groups[part.group];
      Check(static_cast<std::int64_t>(part.block_ids.size()) * g.paged.block_size == g.slots);
      Check(part.skip_tokens >= 0 && part.skip_tokens < g.slots);
      for (const std::int32_t id : part.block_ids) {
        const bool null = g.null_block && id == *g.null_block;
        Check(retrieve ? (id == -1 || (!null && id >= 0 && id < g.paged.num_blocks))
                       : (!null && id >= 0 && id < g.paged.num_blocks));
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::FuzzRequest input;
  if (!fuzz::ParseFuzzInput(data, size, &input) || input.payloads.size() < 5) return 0;
  const std::size_t register_frames = std::min<std::size_t>(input.payloads.size(), 7);
  const auto frames = std::span(input.payloads).first(register_frames);
  const Result<protocol::KvCacheRegistration> r = protocol::DecodeKvCacheRegistration(frames);
  if (!r.ok()) return 0;
  const std::int64_t chunk = 16 * (1 + static_cast<std::int64_t>(input.op_index % 16));
  const Result<gpu::KvLayout> layout = gpu::DetectKvLayout(*r, chunk);
  if (!layout.ok()) return 0;
  CheckLayout(*layout);
  if (input.payloads.size() <= 7) return 0;
  const Result<protocol::GroupBlockIds> ids = protocol::DecodeBlockIds(input.payloads[7]);
  if (!ids.ok()) return 0;
  const std::int64_t chunks = 1 + (input.connection | (input.remote_tcp ? 4 : 0));
  if (!gpu::CheckBlockIds(*layout, chunks, *ids).ok()) return 0;
  CheckPlans(*layout, gpu::PlanStore(*layout, *ids, chunks), false);
  CheckPlans(*layout, gpu::PlanRetrieve(*layout, *ids, chunks, chunk / 2 + 3), true);
  return 0;
}
