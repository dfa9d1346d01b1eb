// The frames of the CUDA-IPC operations (spec 3.2, 3.3, 10): register_kv_cache's
// seven payload frames, store/retrieve's block ids and event handle, and their
// reply (event handle, success).
//
// kv_cache is a list of msgpack ext 1 values, each the pickle of one layer's
// wrapper (device_ipc_wrapper.h). block_ids is one list per KV group, or one
// flat list (older clients); this server serves one group. Unknown hint keys
// and group fields are ignored, as msgspec does.
//
// Thread-safety: stateless functions.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"
#include "protocol/device_ipc_wrapper.h"

namespace lmcache::protocol {

inline constexpr std::size_t kMaxKvLayers = 1024;
inline constexpr std::size_t kEventHandleBytes = 64;  // cudaIpcEventHandle_t

// layout_hints (spec 4.4); absent keys are nullopt.
struct LayoutHints {
  std::optional<std::string> kv_layout;
  std::optional<std::int64_t> num_kv_heads;
  std::optional<std::int64_t> tokens_per_block;
  std::optional<std::int64_t> head_dim;
};

struct KvCacheRegistration {
  std::int64_t instance_id = 0;
  std::vector<DeviceIpcWrapper> layers;  // kv_cache, in the engine's layer order
  std::string model_name;
  std::int64_t world_size = 1;
  LayoutHints hints;
  std::size_t engine_groups = 0;  // entries of engine_group_infos (0: one group)
};

// register_kv_cache's frames: instance_id, kv_cache, model_name, world_size,
// engine_type, layout_hints, engine_group_infos.
Result<KvCacheRegistration> DecodeKvCacheRegistration(std::span<const std::string_view> frames);

// The block ids of the only KV group: [[...]] or [...]; more groups are refused.
Result<std::vector<std::int32_t>> DecodeBlockIds(std::string_view frame);

// A 64-byte bin: an interprocess event handle.
Result<std::array<std::uint8_t, kEventHandleBytes>> DecodeEventHandle(std::string_view frame);

// store/retrieve's reply: [bin(64), bool] (spec 3.3).
std::string EncodeEventReply(const std::array<std::uint8_t, kEventHandleBytes>& handle, bool success);

}  // namespace lmcache::protocol
