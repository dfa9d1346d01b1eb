#include "gpu/kv_format.h"

#include <array>
#include <optional>
#include <string_view>

namespace lmcache::gpu {
namespace {

// What one physical axis of a tensor holds.
enum class Axis : std::uint8_t { kLayer, kPlane, kBlock, kToken, kHead, kContent };

struct FormatRow {
  KvFormat format;
  std::string_view name;
  std::size_t rank;
  std::array<Axis, 6> axes;
};

constexpr FormatRow kFormats[] = {
    {KvFormat::kCrossLayer, "NB_NL_TWO_BS_NH_HS", 6,
     {Axis::kBlock, Axis::kLayer, Axis::kPlane, Axis::kToken, Axis::kHead, Axis::kContent}},
    {KvFormat::kNhd, "NL_X_TWO_NB_BS_NH_HS", 5,
     {Axis::kPlane, Axis::kBlock, Axis::kToken, Axis::kHead, Axis::kContent}},
    {KvFormat::kBlocksFirstNhd, "NL_X_NB_TWO_BS_NH_HS", 5,
     {Axis::kBlock, Axis::kPlane, Axis::kToken, Axis::kHead, Axis::kContent}},
    {KvFormat::kMla, "NL_X_NB_BS_HS", 3, {Axis::kBlock, Axis::kToken, Axis::kContent}},
    {KvFormat::kHnd, "NL_X_TWO_NB_NH_BS_HS", 5,
     {Axis::kPlane, Axis::kBlock, Axis::kHead, Axis::kToken, Axis::kContent}},
    {KvFormat::kBlocksFirstHnd, "NL_X_NB_TWO_NH_BS_HS", 5,
     {Axis::kBlock, Axis::kPlane, Axis::kHead, Axis::kToken, Axis::kContent}},
    {KvFormat::kPackedHnd, "NL_X_NB_NH_BS_CS", 4,
     {Axis::kBlock, Axis::kHead, Axis::kToken, Axis::kContent}},
    {KvFormat::kPackedNhd, "NL_X_NB_BS_NH_CS", 4,
     {Axis::kBlock, Axis::kToken, Axis::kHead, Axis::kContent}},
};

const FormatRow& RowOf(KvFormat format) {
  for (const FormatRow& row : kFormats) {
    if (row.format == format) return row;
  }
  return kFormats[1];
}

std::optional<std::size_t> DimOf(const FormatRow& row, Axis axis) {
  for (std::size_t i = 0; i < row.rank; ++i) {
    if (row.axes[i] == axis) return i;
  }
  return std::nullopt;
}

// The NHD and HND twins of a format (heads before or after tokens).
KvFormat Twin(KvFormat format) {
  switch (format) {
    case KvFormat::kNhd: return KvFormat::kHnd;
    case KvFormat::kHnd: return KvFormat::kNhd;
    case KvFormat::kBlocksFirstNhd: return KvFormat::kBlocksFirstHnd;
    case KvFormat::kBlocksFirstHnd: return KvFormat::kBlocksFirstNhd;
    case KvFormat::kPackedNhd: return KvFormat::kPackedHnd;
    case KvFormat::kPackedHnd: return KvFormat::kPackedNhd;
    default: return format;
  }
}

// With one KV head (a 70B model at TP 8) NHD and HND memory are the same
// bytes, and PyTorch calls the NHD-shaped view of HND memory contiguous, so
// the client sends it unpermuted under an HND hint: the axis of size 1 is
// the head, whatever the hint says.
KvFormat Untangled(const protocol::DeviceIpcWrapper& t, KvFormat chosen) {
  const FormatRow& row = RowOf(chosen);
  const std::size_t head = *DimOf(row, Axis::kHead);
  const std::size_t token = *DimOf(row, Axis::kToken);
  if (t.shape[token] == 1 && t.shape[head] != 1) return Twin(chosen);
  return chosen;
}

}  // namespace

Status RefuseRegistration(std::string message) {
  return Status(ErrorCode::kInvalidArgument, "register_kv_cache: " + std::move(message));
}

std::string DimsText(const std::vector<std::int64_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

std::string KvFormatName(KvFormat format) {
  const FormatRow& row = RowOf(format);
  return std::string(row.name) + " (" + std::to_string(static_cast<int>(format)) + ")";
}

bool SplitsKv(KvFormat format) { return DimOf(RowOf(format), Axis::kPlane).has_value(); }

Result<std::string> CanonicalKvLayout(const std::optional<std::string>& hint) {
  const std::string layout = hint.value_or("NHD");
  // vLLM's own names since 0.29: L layers, B blocks, N tokens, H heads, C content.
  if (layout == "NHD" || layout == "LBNHC" || layout == "BLNHC") return std::string("NHD");
  if (layout == "HND" || layout == "LBHNC" || layout == "BLHNC") return std::string("HND");
  return RefuseRegistration("unknown kv_layout hint '" + layout +
                "' (known: NHD, HND, LBNHC, LBHNC, BLNHC, BLHNC)");
}

Result<KvFormat> DetectKvFormat(const protocol::DeviceIpcWrapper& t, const std::string& kv_layout,
                                bool cross_layer) {
  const bool hnd = kv_layout == "HND";
  const std::size_t rank = t.shape.size();
  if (cross_layer) {
    if (rank != 6 || t.shape[2] != 2) {
      return RefuseRegistration("a cross-layer KV cache must be [blocks, layers, 2, block_size, heads, "
                    "head_size]; got " + DimsText(t.shape));
    }
    if (hnd) return RefuseRegistration("a cross-layer KV cache with kv_layout HND is not served (format 0 is NHD)");
    return KvFormat::kCrossLayer;
  }
  if (rank == 4) return Untangled(t, hnd ? KvFormat::kPackedHnd : KvFormat::kPackedNhd);
  if (rank == 5 && t.shape[0] == 2) return Untangled(t, hnd ? KvFormat::kHnd : KvFormat::kNhd);
  if (rank == 5 && t.shape[1] == 2) {
    return Untangled(t, hnd ? KvFormat::kBlocksFirstHnd : KvFormat::kBlocksFirstNhd);
  }
  if (rank == 3) {
    if (t.dtype == "uint8" && t.shape[2] == 132) {
      return Status(ErrorCode::kNotSupported,
                    "register_kv_cache: a DSA indexer cache (uint8 [blocks, block_size, 132], "
                    "format 14) is not served by this server's CUDA-IPC path; use the "
                    "shared-memory path (register_kv_cache_engine_driven_context)");
    }
    return KvFormat::kMla;
  }
  return RefuseRegistration("unsupported KV cache shape " + DimsText(t.shape) + " " + t.dtype +
                " (served: [2, NB, BS, NH, HS], [NB, 2, BS, NH, HS], their HND forms, packed "
                "[NB, NH, BS, 2*HS] / [NB, BS, NH, 2*HS], MLA [NB, BS, C], cross-layer "
                "[NB, NL, 2, BS, NH, HS])");
}

Result<kv::PagedGeometry> PagedGeometryOf(const protocol::DeviceIpcWrapper& t, KvFormat format) {
  const FormatRow& row = RowOf(format);
  if (t.shape.size() != row.rank) return RefuseRegistration("shape " + DimsText(t.shape) + " is not " + KvFormatName(format));
  const auto size = [&](Axis axis, std::int64_t absent) {
    const auto d = DimOf(row, axis);
    return d ? t.shape[*d] : absent;
  };
  const auto bytes = [&](Axis axis, std::int64_t absent) {
    const auto d = DimOf(row, axis);
    return d ? t.stride[*d] * static_cast<std::int64_t>(t.element_size) : absent;
  };
  const std::size_t content = *DimOf(row, Axis::kContent);
  if (t.stride[content] != 1) {
    return RefuseRegistration("the innermost (head or content) dimension is not contiguous: shape " +
                  DimsText(t.shape) + ", strides " + DimsText(t.stride));
  }
  kv::PagedGeometry g{};
  g.planes = size(Axis::kPlane, 1);
  if (g.planes != 1 && g.planes != 2) return RefuseRegistration("the K/V dimension of " + DimsText(t.shape) + " is not 2");
  g.num_blocks = size(Axis::kBlock, 1);
  g.block_size = size(Axis::kToken, 1);
  g.heads = size(Axis::kHead, 1);
  g.head_bytes = t.shape[content] * t.element_size;
  g.plane_stride = bytes(Axis::kPlane, 0);
  g.block_stride = bytes(Axis::kBlock, 0);
  g.token_stride = bytes(Axis::kToken, 0);
  g.head_stride = bytes(Axis::kHead, g.head_bytes);
  return g;
}

LayerAxis LayerAxisOf(const protocol::DeviceIpcWrapper& t, KvFormat format) {
  const auto d = DimOf(RowOf(format), Axis::kLayer);
  if (!d) return {};
  return {t.shape[*d], t.stride[*d] * static_cast<std::int64_t>(t.element_size)};
}

}  // namespace lmcache::gpu
