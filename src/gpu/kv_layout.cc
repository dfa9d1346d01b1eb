#include "gpu/kv_layout.h"

#include <string>
#include <utility>

namespace lmcache::gpu {
namespace {

using protocol::DeviceIpcWrapper;

Status Refuse(std::string message) {
  return Status(ErrorCode::kInvalidArgument, "register_kv_cache: " + std::move(message));
}

std::string Dims(const std::vector<std::int64_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// The geometry of one layer: which physical dimension is what.
struct DimRoles {
  int plane = -1, block = 0, token = 1, head = -1, inner = 2;
};

Result<KvFormat> ChooseFormat(const DeviceIpcWrapper& t, const LayoutHints& hints) {
  const std::string supported =
      " (supported: NHD [2, blocks, block_size, heads, head_size], HND [2, blocks, heads, "
      "block_size, head_size], MLA [blocks, block_size, dim])";
  if (t.shape.size() == 3) return KvFormat::kMla;
  if (t.shape.size() != 5 || t.shape[0] != 2) {
    return Refuse("unsupported KV cache shape " + Dims(t.shape) + supported);
  }
  const std::string layout = hints.kv_layout.value_or("NHD");
  if (layout == "NHD") return KvFormat::kNhd;
  if (layout == "HND") return KvFormat::kHnd;
  return Refuse("unsupported kv_layout hint '" + layout + "'" + supported);
}

DimRoles RolesOf(KvFormat format) {
  switch (format) {
    case KvFormat::kNhd: return {0, 1, 2, 3, 4};
    case KvFormat::kHnd: return {0, 1, 3, 2, 4};
    case KvFormat::kMla: return {-1, 0, 1, -1, 2};
  }
  return {};
}

Status CheckHint(const char* name, const std::optional<std::int64_t>& hint, std::int64_t actual) {
  if (hint && *hint > 0 && *hint != actual) {
    return Refuse(std::string("layout hint ") + name + " is " + std::to_string(*hint) +
                  " but the tensors have " + std::to_string(actual));
  }
  return Status::Ok();
}

Result<kv::PagedGeometry> GeometryOf(const DeviceIpcWrapper& t, KvFormat format,
                                     const LayoutHints& hints) {
  const DimRoles r = RolesOf(format);
  const auto bytes = [&](int dim) { return dim < 0 ? 0 : t.stride[dim] * t.element_size; };
  if (t.stride[r.inner] != 1) {
    return Refuse("the head dimension is not contiguous (strides " + Dims(t.stride) + ")");
  }
  kv::PagedGeometry g{};
  g.planes = r.plane < 0 ? 1 : 2;
  g.num_blocks = t.shape[r.block];
  g.block_size = t.shape[r.token];
  g.heads = r.head < 0 ? 1 : t.shape[r.head];
  g.head_bytes = t.shape[r.inner] * t.element_size;
  g.plane_stride = bytes(r.plane);
  g.block_stride = bytes(r.block);
  g.token_stride = bytes(r.token);
  g.head_stride = r.head < 0 ? g.head_bytes : bytes(r.head);
  LMC_RETURN_IF_ERROR(CheckHint("tokens_per_block", hints.tokens_per_block, g.block_size));
  if (format != KvFormat::kMla) {
    LMC_RETURN_IF_ERROR(CheckHint("num_kv_heads", hints.num_kv_heads, g.heads));
    LMC_RETURN_IF_ERROR(CheckHint("head_dim", hints.head_dim, t.shape[r.inner]));
  }
  return g;
}

bool SameTensorShape(const DeviceIpcWrapper& a, const DeviceIpcWrapper& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.stride == b.stride &&
         a.device_uuid == b.device_uuid;
}

}  // namespace

const char* KvFormatName(KvFormat format) {
  switch (format) {
    case KvFormat::kNhd: return "NHD";
    case KvFormat::kHnd: return "HND";
    case KvFormat::kMla: return "MLA";
  }
  return "?";
}

kv::ObjectGeometry KvLayout::Object(std::int64_t chunk_tokens) const {
  return {geometry.planes, num_layers(), chunk_tokens, geometry.heads * geometry.head_bytes};
}

std::uint64_t KvLayout::ObjectBytes(std::int64_t chunk_tokens) const {
  const kv::ObjectGeometry o = Object(chunk_tokens);
  return static_cast<std::uint64_t>(o.planes * o.layers * o.chunk_tokens * o.token_bytes);
}

Result<KvLayout> DetectKvLayout(std::span<const DeviceIpcWrapper> layers, const LayoutHints& hints) {
  if (layers.empty()) return Refuse("kv_cache holds no tensors");
  const DeviceIpcWrapper& first = layers.front();
  for (std::size_t i = 1; i < layers.size(); ++i) {
    if (!SameTensorShape(first, layers[i])) {
      return Refuse("layer " + std::to_string(i) + " (" + layers[i].dtype + " " +
                    Dims(layers[i].shape) + ") differs from layer 0 (" + first.dtype + " " +
                    Dims(first.shape) + "); hybrid layouts are not supported");
    }
  }
  KvLayout layout;
  LMC_ASSIGN_OR_RETURN(layout.format, ChooseFormat(first, hints));
  LMC_ASSIGN_OR_RETURN(layout.geometry, GeometryOf(first, layout.format, hints));
  layout.dtype = first.dtype;
  layout.element_size = first.element_size;
  layout.device_uuid = first.device_uuid;
  layout.layers.assign(layers.begin(), layers.end());
  return layout;
}

Status CheckChunkSize(const KvLayout& layout, std::int64_t chunk_tokens) {
  if (chunk_tokens % layout.geometry.block_size != 0) {
    return Refuse("the server's chunk size " + std::to_string(chunk_tokens) +
                  " is not a multiple of the cache's block_size " +
                  std::to_string(layout.geometry.block_size) + "; start the server with a "
                  "--chunk-size that is");
  }
  return Status::Ok();
}

Status CheckBlockIds(const KvLayout& layout, std::int64_t tokens,
                     std::span<const std::int32_t> block_ids) {
  const std::int64_t block_size = layout.geometry.block_size;
  const std::int64_t needed = (tokens + block_size - 1) / block_size;
  if (static_cast<std::int64_t>(block_ids.size()) < needed) {
    return Status(ErrorCode::kInvalidArgument,
                  std::to_string(tokens) + " tokens need " + std::to_string(needed) +
                      " block ids of " + std::to_string(block_size) + " tokens; got " +
                      std::to_string(block_ids.size()));
  }
  for (std::int64_t i = 0; i < needed; ++i) {
    if (block_ids[i] < 0 || block_ids[i] >= layout.geometry.num_blocks) {
      return Status(ErrorCode::kInvalidArgument,
                    "block id " + std::to_string(block_ids[i]) + " is outside the cache's " +
                        std::to_string(layout.geometry.num_blocks) + " blocks");
    }
  }
  return Status::Ok();
}

}  // namespace lmcache::gpu
