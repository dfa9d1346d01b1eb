#include "gpu/kv_layout.h"

#include <set>
#include <string>
#include <utility>

namespace lmcache::gpu {
namespace {

using protocol::DeviceIpcWrapper;
using protocol::EngineGroupInfo;


std::string GroupName(std::size_t g) { return "engine group " + std::to_string(g); }

bool SameTensorShape(const DeviceIpcWrapper& a, const DeviceIpcWrapper& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.stride == b.stride;
}

// The layers each group names, checked: in range, each in one group at most.
Result<std::vector<std::vector<std::size_t>>> GroupLayers(const protocol::KvCacheRegistration& r,
                                                          std::size_t layers) {
  std::vector<std::vector<std::size_t>> out;
  if (r.groups.empty()) {
    out.emplace_back();
    for (std::size_t i = 0; i < layers; ++i) out.back().push_back(i);
    return out;
  }
  if (r.cross_layer) {
    if (r.groups.size() != 1) return RefuseRegistration("a cross-layer KV cache is one group, got " + std::to_string(r.groups.size()));
    out.emplace_back(1, 0);
    return out;
  }
  std::set<std::size_t> seen;
  for (std::size_t g = 0; g < r.groups.size(); ++g) {
    std::vector<std::size_t>& mine = out.emplace_back();
    for (const std::int64_t i : r.groups[g].layer_indices) {
      if (i < 0 || static_cast<std::size_t>(i) >= layers) {
        return RefuseRegistration(GroupName(g) + " names layer " + std::to_string(i) + " of " +
                      std::to_string(layers) + " registered");
      }
      if (!seen.insert(static_cast<std::size_t>(i)).second) {
        return RefuseRegistration("layer " + std::to_string(i) + " is in two engine groups");
      }
      mine.push_back(static_cast<std::size_t>(i));
    }
    if (mine.empty()) return RefuseRegistration(GroupName(g) + " names no layer");
  }
  return out;  // layers no group names are KV-sharing aliases: not copied
}

Status CheckHint(const char* name, const std::optional<std::int64_t>& hint, std::int64_t actual) {
  if (hint && *hint > 0 && *hint != actual) {
    return RefuseRegistration(std::string("layout hint ") + name + " is " + std::to_string(*hint) +
                  " but the tensors have " + std::to_string(actual));
  }
  return Status::Ok();
}

// Hints describe a single-group model's attention layers.
Status CheckHints(const protocol::LayoutHints& hints, const KvGroupLayout& g) {
  LMC_RETURN_IF_ERROR(CheckHint("tokens_per_block", hints.tokens_per_block, g.paged.block_size));
  if (g.format == KvFormat::kMla) return Status::Ok();
  LMC_RETURN_IF_ERROR(CheckHint("num_kv_heads", hints.num_kv_heads, g.paged.heads));
  const std::int64_t content = g.paged.head_bytes / g.element_size;
  const bool packed = !SplitsKv(g.format);
  return CheckHint("head_dim", hints.head_dim, packed ? content / 2 : content);
}

// How many tokens of each chunk the group keeps, from its window.
Status ApplyWindow(const EngineGroupInfo& info, std::size_t index, std::int64_t chunk,
                   KvGroupLayout* g) {
  std::int64_t window = info.sw_size_tokens;
  if (info.recurrent_state && window <= 0) window = g->paged.block_size;  // one block of state
  if (window != -1 && window <= 0) {
    return RefuseRegistration(GroupName(index) + " has sw_size_tokens " + std::to_string(window) +
                  " (-1 for full attention, or the window in tokens)");
  }
  g->window_tokens = window;
  g->slots = chunk;
  if (window > 0 && window < chunk) {
    if (window % g->paged.block_size != 0) {
      return RefuseRegistration(GroupName(index) + "'s window of " + std::to_string(window) +
                    " tokens is shorter than a chunk and not whole blocks of " +
                    std::to_string(g->paged.block_size));
    }
    g->slots = window;
  }
  return Status::Ok();
}

Result<KvGroupLayout> BuildGroup(const protocol::KvCacheRegistration& r,
                                 const std::vector<std::size_t>& indices, std::size_t index,
                                 const std::string& kv_layout, std::int64_t chunk) {
  const DeviceIpcWrapper& first = r.layers[indices.front()];
  for (const std::size_t i : indices) {
    const DeviceIpcWrapper& t = r.layers[i];
    if (!SameTensorShape(first, t)) {
      return RefuseRegistration("layer " + std::to_string(i) + " (" + t.dtype + " " + DimsText(t.shape) + " strides " +
                    DimsText(t.stride) + ") differs from layer " + std::to_string(indices.front()) +
                    " (" + first.dtype + " " + DimsText(first.shape) + " strides " + DimsText(first.stride) +
                    ") of the same KV group; give layers of another shape their own "
                    "engine_group_infos entry");
    }
  }
  KvGroupLayout g;
  LMC_ASSIGN_OR_RETURN(g.format, DetectKvFormat(first, kv_layout, r.cross_layer));
  LMC_ASSIGN_OR_RETURN(g.paged, PagedGeometryOf(first, g.format));
  g.dtype = first.dtype;
  g.element_size = first.element_size;
  if (r.cross_layer) {
    const LayerAxis axis = LayerAxisOf(first, g.format);
    for (std::int64_t l = 0; l < axis.layers; ++l) {
      g.layers.push_back({0, first.first_byte() + static_cast<std::uint64_t>(l * axis.stride_bytes)});
    }
  } else {
    for (const std::size_t i : indices) g.layers.push_back({i, r.layers[i].first_byte()});
  }
  const EngineGroupInfo info = r.groups.empty() ? EngineGroupInfo{} : r.groups[index];
  if (info.tokens_per_block > 0 && info.tokens_per_block != g.paged.block_size) {
    return RefuseRegistration(GroupName(index) + " declares tokens_per_block " +
                  std::to_string(info.tokens_per_block) + " but its tensors hold blocks of " +
                  std::to_string(g.paged.block_size) +
                  " tokens: compressed or kernel-split blocks are not served");
  }
  if (chunk % g.paged.block_size != 0) {
    return RefuseRegistration("the server's chunk size " + std::to_string(chunk) +
                  " is not a multiple of " + GroupName(index) + "'s block size " +
                  std::to_string(g.paged.block_size) + "; start the server with a --chunk-size that is");
  }
  LMC_RETURN_IF_ERROR(ApplyWindow(info, index, chunk, &g));
  if (info.null_block_id) g.null_block = static_cast<std::int32_t>(*info.null_block_id);
  return g;
}

// The reference's own object layouts (what the engine-driven path stores too) keep namespace 0.
bool IsReferenceLayout(const KvLayout& layout) {
  if (layout.groups.size() != 1) return false;
  const KvGroupLayout& g = layout.groups.front();
  return g.slots == layout.chunk_tokens && (SplitsKv(g.format) || g.format == KvFormat::kMla);
}

std::uint32_t Fingerprint(const std::string& description) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a: a namespace tag, not a defence
  for (const char c : description) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return static_cast<std::uint32_t>(h % 0x7fffffffu) + 1;  // never 0
}

}  // namespace

std::uint64_t KvGroupLayout::part_bytes() const {
  const kv::ObjectGeometry o = object();
  return static_cast<std::uint64_t>(o.planes * o.layers * o.chunk_tokens * o.token_bytes);
}

std::vector<std::int64_t> KvGroupLayout::ObjectShape() const {
  const std::int64_t row = paged.heads * paged.head_bytes / element_size;
  if (format == KvFormat::kMla) return {num_layers(), slots, row};
  return {paged.planes, num_layers(), slots, row};
}

std::string KvLayout::Describe() const {
  std::string out = std::to_string(groups.size()) + (groups.size() == 1 ? " group:" : " groups:");
  for (const KvGroupLayout& g : groups) {
    // Appended piece by piece: gcc 12 warns falsely (-Wrestrict) on a chain of string +.
    out.append(" ").append(KvFormatName(g.format)).append(" ").append(g.dtype);
    out.append(" x ").append(std::to_string(g.num_layers())).append(" layers ");
    out.append(DimsText(g.ObjectShape()));
    if (g.window_tokens > 0) out.append(" window ").append(std::to_string(g.window_tokens));
    out += ";";
  }
  out.pop_back();
  return out;
}

Result<KvLayout> DetectKvLayout(const protocol::KvCacheRegistration& r, std::int64_t chunk_tokens) {
  if (r.layers.empty()) return RefuseRegistration("kv_cache holds no tensors");
  for (std::size_t i = 1; i < r.layers.size(); ++i) {
    if (r.layers[i].device_uuid != r.layers[0].device_uuid) {
      return RefuseRegistration("layer " + std::to_string(i) + " is on GPU " + r.layers[i].device_uuid +
                    " and layer 0 on " + r.layers[0].device_uuid + ": one registration is one GPU");
    }
  }
  LMC_ASSIGN_OR_RETURN(const std::string kv_layout, CanonicalKvLayout(r.hints.kv_layout));
  LMC_ASSIGN_OR_RETURN(const auto group_layers, GroupLayers(r, r.layers.size()));
  KvLayout layout;
  layout.device_uuid = r.layers[0].device_uuid;
  layout.tensors = r.layers;
  layout.chunk_tokens = chunk_tokens;
  for (std::size_t g = 0; g < group_layers.size(); ++g) {
    LMC_ASSIGN_OR_RETURN(KvGroupLayout group, BuildGroup(r, group_layers[g], g, kv_layout, chunk_tokens));
    group.object_offset = layout.object_bytes;
    layout.object_bytes += group.part_bytes();
    layout.groups.push_back(std::move(group));
  }
  if (layout.groups.size() == 1) LMC_RETURN_IF_ERROR(CheckHints(r.hints, layout.groups.front()));
  layout.object_namespace = IsReferenceLayout(layout) ? 0 : Fingerprint(layout.Describe());
  return layout;
}

}  // namespace lmcache::gpu
