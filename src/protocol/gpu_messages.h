// The frames of the CUDA-IPC operations (../shared/reference/gpu-registration.md
// section 1; spec 3.2, 3.3, 10): register_kv_cache's payload frames,
// store/retrieve's block ids and event handle, and their reply (event
// handle, success).
//
// register_kv_cache: instance_id, kv_cache, model_name, world_size, then
// (newer clients) engine_type, layout_hints, engine_group_infos; 5 to 7
// frames, later ones ignored. kv_cache is a list of msgpack ext 1 values,
// each one layer's wrapper (device_ipc_wrapper.h), or one bare ext 1 (a
// cross-layer tensor). block_ids is one list per KV group, in
// engine_group_infos order, or one flat list (older clients: one group).
// Unknown hint keys and group fields are ignored, as msgspec does.
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
inline constexpr std::size_t kMaxKvGroups = 64;
inline constexpr std::size_t kEventHandleBytes = kCudaIpcEventBytes;

// layout_hints (gpu-registration.md 1); absent keys are nullopt.
struct LayoutHints {
  std::optional<std::string> kv_layout;
  std::optional<std::int64_t> num_kv_heads;
  std::optional<std::int64_t> tokens_per_block;
  std::optional<std::int64_t> head_dim;
};

// One entry of engine_group_infos (spec 4.3 and newer fields).
struct EngineGroupInfo {
  std::int64_t engine_group_id = 0;
  std::vector<std::int64_t> layer_indices;  // indexes into kv_cache
  std::int64_t tokens_per_block = 0;        // 0: the tensor's block size
  std::int64_t sw_size_tokens = -1;         // -1: full attention
  bool recurrent_state = false;
  std::optional<std::int64_t> null_block_id = 0;  // nullopt: the group has no null block
};

struct KvCacheRegistration {
  std::int64_t instance_id = 0;
  std::vector<DeviceIpcWrapper> layers;  // kv_cache, in the engine's layer order
  bool cross_layer = false;              // kv_cache was one bare tensor, not a list
  std::string model_name;
  std::int64_t world_size = 1;
  std::string engine_type;  // "" when not sent or nil
  LayoutHints hints;
  std::vector<EngineGroupInfo> groups;  // empty: one group of every layer
};

// register_kv_cache's frames (5 to 7; more are ignored).
Result<KvCacheRegistration> DecodeKvCacheRegistration(std::span<const std::string_view> frames);

// The block ids of each KV group: [[...], [...]] or one flat list [...].
using GroupBlockIds = std::vector<std::vector<std::int32_t>>;
Result<GroupBlockIds> DecodeBlockIds(std::string_view frame);

// A 64-byte bin: an interprocess event handle.
Result<std::array<std::uint8_t, kEventHandleBytes>> DecodeEventHandle(std::string_view frame);

// store/retrieve's reply: [bin(64), bool] (spec 3.3).
std::string EncodeEventReply(const std::array<std::uint8_t, kEventHandleBytes>& handle, bool success);

}  // namespace lmcache::protocol
