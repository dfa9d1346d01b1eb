// VllmKvCache: the paged KV cache tensors a vLLM worker allocates, as the
// LMCache MP connector describes them in register_kv_cache
// (../shared/reference/gpu-registration.md section 4; vLLM's attention
// backends' get_kv_cache_shape / stride order and, from 0.29,
// vllm/v1/kv_cache_layout.py; LMCache's CudaIPCWrapper, which sends a view
// permuted into physical order by descending stride unless PyTorch already
// calls it contiguous).
//
// Each Layout names how vLLM lays out one KV group in memory, outermost axis
// first; the fake derives the wrappers (shape, stride, storage_offset, the
// storage's offset and bytes in the allocation) from it, and states
// independently, by the same description, where element (layer, kv, block,
// token, head, d) lives, so a test compares the server's reading of the
// wrappers with vLLM's own arithmetic.
//
// Thread-safety: plain values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "protocol/device_ipc_wrapper.h"
#include "protocol/gpu_messages.h"

namespace lmcache::testing {

enum class Axis { kLayer, kKv, kBlock, kToken, kHead, kDim, kContent /* packed: kv * HS + d */ };

enum class Layout {
  kFlashAttnNhd,     // vLLM <= 0.22 FlashAttention: per layer [2, NB, BS, NH, HS]          (format 1)
  kFlashAttnHnd,     // the same with stride order (0, 1, 3, 2, 4): [2, NB, NH, BS, HS]      (6)
  kBlocksFirstNhd,   // FlashInfer <= 0.22, every backend 0.23-0.25 (vllm #42095)          (2)
  kBlocksFirstHnd,   // [NB, 2, NH, BS, HS]                                                 (7)
  kPackedHnd,        // 0.26-0.28 (vllm #44455): per layer [NB, NH, BS, 2*HS]              (12)
  kPackedNhd,        // the NHD stride order (0, 2, 1, 3): [NB, BS, NH, 2*HS]              (13)
  kSharedLbhnc,      // >= 0.29 (vllm #51718) LBHNC: layers' views into one allocation      (12)
  kSharedLbnhc,      // >= 0.29 LBNHC (vLLM's default preference)                           (13)
  kSharedBlhnc,      // >= 0.29 BLHNC: blocks outermost, a layer's block stride spans all    (12)
  kMla,              // MLA through 0.28: per layer [NB, BS, C]                              (3)
  kSharedMla4d,      // MLA from 0.29: [NB, 1, BS, C] views (LBHNC)                          (12)
  kCrossLayer,       // one tensor [NB, NL, 2, BS, NH, HS]                                   (0)
};

struct Geometry {
  std::int64_t layers = 2;
  std::int64_t blocks = 8;
  std::int64_t block_size = 4;
  std::int64_t heads = 2;
  std::int64_t head_size = 8;  // MLA: the latent width C
  std::uint32_t element_size = 2;
  std::string dtype = "bfloat16";
  std::int64_t pad = 0;                 // elements of padding after each outermost-axis entry
  std::uint64_t storage_byte_offset = 0;  // the first storage's offset in the cudaMalloc segment
};

struct AxisSize {
  Axis axis;
  std::int64_t size;
};

inline bool Shared(Layout l) {
  return l == Layout::kSharedLbhnc || l == Layout::kSharedLbnhc || l == Layout::kSharedBlhnc ||
         l == Layout::kSharedMla4d;
}
inline bool Mla(Layout l) { return l == Layout::kMla || l == Layout::kSharedMla4d; }
inline bool Packed(Layout l) {
  return l == Layout::kPackedHnd || l == Layout::kPackedNhd || l == Layout::kSharedLbhnc ||
         l == Layout::kSharedLbnhc || l == Layout::kSharedBlhnc;
}
// The kv_layout hint the connector sends.
inline std::string Hint(Layout l) {
  switch (l) {
    case Layout::kFlashAttnHnd:
    case Layout::kBlocksFirstHnd:
    case Layout::kPackedHnd: return "HND";
    case Layout::kSharedLbhnc:
    case Layout::kSharedMla4d: return "LBHNC";
    case Layout::kSharedBlhnc: return "BLHNC";
    case Layout::kSharedLbnhc: return "LBNHC";
    default: return "NHD";
  }
}

// vLLM's memory order of one group, outermost first (kLayer: the layers of
// a shared allocation; per-layer allocations have none).
inline std::vector<AxisSize> MemoryOrder(Layout l, const Geometry& g) {
  const AxisSize L{Axis::kLayer, g.layers}, K{Axis::kKv, 2}, B{Axis::kBlock, g.blocks},
      N{Axis::kToken, g.block_size}, H{Axis::kHead, g.heads}, D{Axis::kDim, g.head_size},
      C{Axis::kContent, 2 * g.head_size}, One{Axis::kHead, 1}, Latent{Axis::kContent, g.head_size};
  switch (l) {
    case Layout::kFlashAttnNhd: return {K, B, N, H, D};
    case Layout::kFlashAttnHnd: return {K, B, H, N, D};
    case Layout::kBlocksFirstNhd: return {B, K, N, H, D};
    case Layout::kBlocksFirstHnd: return {B, K, H, N, D};
    case Layout::kPackedHnd: return {B, H, N, C};
    case Layout::kPackedNhd: return {B, N, H, C};
    case Layout::kSharedLbhnc: return {L, B, H, N, C};
    case Layout::kSharedLbnhc: return {L, B, N, H, C};
    case Layout::kSharedBlhnc: return {B, L, H, N, C};
    case Layout::kMla: return {B, N, Latent};
    case Layout::kSharedMla4d: return {L, B, One, N, Latent};
    case Layout::kCrossLayer: return {B, L, K, N, H, D};
  }
  return {};
}

// vLLM's logical view of a layer where its memory order is a permutation of
// it: FlashAttention's [2, NB, BS, NH, HS] over HND memory, the packed
// [NB, NH, BS, 2*HS] over NHD memory. The wrapper sends this order
// unpermuted when PyTorch calls the view contiguous, as it does when the
// permuted axes have size 1 (one KV head per rank).
inline std::vector<Axis> LogicalOrder(Layout l) {
  switch (l) {
    case Layout::kFlashAttnHnd: return {Axis::kKv, Axis::kBlock, Axis::kToken, Axis::kHead, Axis::kDim};
    case Layout::kBlocksFirstHnd: return {Axis::kBlock, Axis::kKv, Axis::kToken, Axis::kHead, Axis::kDim};
    case Layout::kPackedNhd:
    case Layout::kSharedLbnhc: return {Axis::kBlock, Axis::kHead, Axis::kToken, Axis::kContent};
    default: return {};
  }
}

struct Cache {
  Layout layout;
  Geometry geometry;
  std::vector<protocol::DeviceIpcWrapper> layers;  // as the connector wraps them
  bool cross_layer = false;
  std::uint64_t allocation_bytes = 0;  // what the allocation (segment) must hold
  std::vector<AxisSize> order;
  std::vector<std::int64_t> strides;  // elements, per entry of `order`
  std::uint64_t layer_stride_bytes = 0;  // per-layer allocations: between their storages

  // Byte offset from the allocation's base of one element (d: byte in the head's row).
  std::uint64_t ElementByte(std::int64_t layer, std::int64_t kv, std::int64_t block, std::int64_t token,
                            std::int64_t head, std::int64_t byte) const {
    const std::int64_t e = geometry.element_size;
    std::int64_t at = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      std::int64_t index = 0;
      switch (order[i].axis) {
        case Axis::kLayer: index = layer; break;
        case Axis::kKv: index = kv; break;
        case Axis::kBlock: index = block; break;
        case Axis::kToken: index = token; break;
        case Axis::kHead: index = order[i].size == 1 ? 0 : head; break;
        case Axis::kDim: index = byte / e; break;
        case Axis::kContent: index = (Mla(layout) ? 0 : kv * geometry.head_size) + byte / e; break;
      }
      at += index * strides[i];
    }
    const std::uint64_t base = geometry.storage_byte_offset +
                               (Shared(layout) || layout == Layout::kCrossLayer ? 0 : layer * layer_stride_bytes);
    return base + static_cast<std::uint64_t>(at * e + byte % e);
  }
};

// One group's tensors as the connector registers them; every storage lives
// in one allocation (one cudaMalloc segment: per-layer tensors are blocks of
// the caching allocator's segment, handle[3] their offsets).
inline Cache MakeCache(Layout layout, const Geometry& g, const protocol::MemHandle& handle) {
  Cache c;
  c.layout = layout;
  c.geometry = g;
  c.order = MemoryOrder(layout, g);
  c.strides.assign(c.order.size(), 1);
  for (std::size_t i = c.order.size() - 1; i-- > 0;) {
    c.strides[i] = c.strides[i + 1] * c.order[i + 1].size + (i == 0 ? g.pad : 0);
  }
  const std::int64_t total = c.strides[0] * c.order[0].size;
  const std::uint64_t storage_bytes = static_cast<std::uint64_t>(total) * g.element_size;
  c.cross_layer = layout == Layout::kCrossLayer;
  const bool shared = Shared(layout) || c.cross_layer;
  c.layer_stride_bytes = (storage_bytes + 511) / 512 * 512;  // caching-allocator blocks are 512-byte aligned
  c.allocation_bytes = g.storage_byte_offset + (shared ? storage_bytes : c.layer_stride_bytes * g.layers);
  // The wrapper's view: the axes without the layer axis (a cross-layer tensor keeps it).
  std::vector<std::size_t> view;
  for (std::size_t i = 0; i < c.order.size(); ++i) {
    if (c.order[i].axis != Axis::kLayer || c.cross_layer) view.push_back(i);
  }
  // PyTorch calls a view contiguous ignoring axes of size 1, so the connector
  // sends the logical order then (one KV head per rank under HND, MLA 4-D).
  const bool one_head = std::any_of(view.begin(), view.end(), [&](std::size_t i) {
    return c.order[i].axis == Axis::kHead && c.order[i].size == 1;
  });
  if (const std::vector<Axis> logical = LogicalOrder(layout); !logical.empty() && one_head) {
    std::vector<std::size_t> reordered;
    for (const Axis a : logical) {
      for (const std::size_t i : view) {
        if (c.order[i].axis == a) reordered.push_back(i);
      }
    }
    view = reordered;
  }
  const std::int64_t layers = c.cross_layer ? 1 : g.layers;
  for (std::int64_t l = 0; l < layers; ++l) {
    protocol::DeviceIpcWrapper w;
    w.kind = protocol::IpcWrapperKind::kTorchStorage;
    w.dtype = g.dtype;
    w.element_size = g.element_size;
    for (const std::size_t i : view) {
      w.shape.push_back(c.order[i].size);
      w.stride.push_back(c.strides[i]);
    }
    std::int64_t offset = 0;
    if (Shared(layout)) {
      for (std::size_t i = 0; i < c.order.size(); ++i) {
        if (c.order[i].axis == Axis::kLayer) offset = l * c.strides[i];
      }
    }
    w.storage_offset = offset;
    w.device_uuid = "6b1c8c6e-2f5d-4a8e-9f63-0c2d7e4b9a11";
    w.mem_handle = handle;
    w.handle_form = protocol::ShareableHandleForm::kTorchCudaMalloc;
    w.handle_version = 2;
    w.storage_byte_offset = g.storage_byte_offset + (shared ? 0 : l * c.layer_stride_bytes);
    w.storage_bytes = storage_bytes;
    c.layers.push_back(w);
  }
  return c;
}

// The registration of `caches` as KV groups (one engine group each, layers
// numbered in order), as the connector sends it.
inline protocol::KvCacheRegistration Registration(const std::vector<const Cache*>& caches,
                                                  std::vector<protocol::EngineGroupInfo> groups = {}) {
  protocol::KvCacheRegistration r;
  r.instance_id = 42;
  r.model_name = "vllm-fake";
  r.world_size = 1;
  r.engine_type = "vllm";
  r.hints.kv_layout = Hint(caches.front()->layout);
  const bool name_groups = groups.empty() && caches.size() > 1;
  for (std::size_t n = 0; n < caches.size(); ++n) {
    protocol::EngineGroupInfo info;
    info.engine_group_id = static_cast<std::int64_t>(n);
    for (const auto& w : caches[n]->layers) {
      info.layer_indices.push_back(static_cast<std::int64_t>(r.layers.size()));
      r.layers.push_back(w);
    }
    if (name_groups) groups.push_back(info);
    r.cross_layer = caches[n]->cross_layer;
  }
  r.groups = std::move(groups);
  return r;
}

}  // namespace lmcache::testing
