// KvFormat: the vLLM GPU KV cache formats the reference recognises
// (LMCache's EngineKVFormat, csrc/engine_kv_format.def;
// ../shared/reference/gpu-registration.md section 3), each a naming of the
// axes of one registered tensor in physical order, and the one stride-driven
// geometry (kv_index.h's PagedGeometry) every format maps to.
//
//   id  per-layer physical shape      axes                 kv_layout hint
//    0  [NB, NL, 2, BS, NH, HS]       b, l, kv, t, h, d    (one bare tensor)
//    1  [2, NB, BS, NH, HS]           kv, b, t, h, d       NHD
//    2  [NB, 2, BS, NH, HS]           b, kv, t, h, d       NHD
//    3  [NB, BS, C]                   b, t, c              (MLA)
//    6  [2, NB, NH, BS, HS]           kv, b, h, t, d       HND
//    7  [NB, 2, NH, BS, HS]           b, kv, h, t, d       HND
//   12  [NB, NH, BS, 2*HS]            b, h, t, c           HND / LBHNC / BLHNC
//   13  [NB, BS, NH, 2*HS]            b, t, h, c           NHD / LBNHC / BLNHC
// Detection follows the reference: rank 4 -> 12/13 by the hint; rank 5 with
// shape[0] == 2 -> 1/6, with shape[1] == 2 -> 2/7; rank 3 -> 3 (a uint8
// [NB, BS, 132] DSA indexer cache, format 14, is refused); one bare tensor
// -> 0. Any strides are accepted as long as the innermost (content) axis is
// contiguous: dim-0 padding, per-layer views into one shared allocation and
// blocks-first strides all reduce to the same byte strides per named axis.
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kv_index.h"
#include "lmcache/status.h"
#include "protocol/device_ipc_wrapper.h"

namespace lmcache::gpu {

enum class KvFormat : std::uint8_t {
  kCrossLayer = 0,
  kNhd = 1,
  kBlocksFirstNhd = 2,
  kMla = 3,
  kHnd = 6,
  kBlocksFirstHnd = 7,
  kPackedHnd = 12,
  kPackedNhd = 13,
};

// "NL_X_NB_NH_BS_CS (12)": the reference's name and id.
std::string KvFormatName(KvFormat format);

// The CPU object of a format keeps K and V as separate planes
// ([2, L, T, NH*HS]) or one plane ([1, L, T, row]: packed K|V per head, MLA).
bool SplitsKv(KvFormat format);

// kv_layout canonicalised: "NHD" or "HND" (absent: NHD); an unknown value is
// kInvalidArgument naming the values accepted.
Result<std::string> CanonicalKvLayout(const std::optional<std::string>& hint);

// How registration refuses: kInvalidArgument "register_kv_cache: <message>".
Status RefuseRegistration(std::string message);
// "[2, 100, 16]", for messages.
std::string DimsText(const std::vector<std::int64_t>& dims);

// The format of one tensor. `cross_layer`: kv_cache was one bare tensor.
Result<KvFormat> DetectKvFormat(const protocol::DeviceIpcWrapper& tensor, const std::string& kv_layout,
                                bool cross_layer);

// The byte strides of each named axis of `tensor` in `format`.
Result<kv::PagedGeometry> PagedGeometryOf(const protocol::DeviceIpcWrapper& tensor, KvFormat format);

// Cross-layer tensors (format 0): layers and the byte stride between them.
struct LayerAxis {
  std::int64_t layers = 1;
  std::int64_t stride_bytes = 0;
};
LayerAxis LayerAxisOf(const protocol::DeviceIpcWrapper& tensor, KvFormat format);

}  // namespace lmcache::gpu
