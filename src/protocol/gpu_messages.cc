#include "protocol/gpu_messages.h"

#include <cstring>
#include <limits>

#include "common/msgpack_cursor.h"
#include "protocol/wire_codec.h"

namespace lmcache::protocol {
namespace {

using mp::Malformed;
using mp::MsgpackCursor;

Result<std::vector<DeviceIpcWrapper>> ReadKvCache(MsgpackCursor& in) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t count, in.ReadArrayHeader("kv_cache"));
  if (count == 0 || count > kMaxKvLayers) {
    return Status(ErrorCode::kInvalidArgument, "kv_cache holds " + std::to_string(count) +
                                                   " tensors (want 1 to " +
                                                   std::to_string(kMaxKvLayers) + ")");
  }
  std::vector<DeviceIpcWrapper> layers;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::string what = "kv_cache[" + std::to_string(i) + "]";
    LMC_ASSIGN_OR_RETURN(const auto ext, in.ReadExt(what));
    if (ext.first != 1) return Malformed(what, "ext type " + std::to_string(ext.first) + ", not 1 (a pickled DeviceIPCWrapper)");
    Result<DeviceIpcWrapper> wrapper = DecodeDeviceIpcWrapper(ext.second);
    if (!wrapper.ok()) return wrapper.status().WithContext(what);
    layers.push_back(std::move(*wrapper));
  }
  return layers;
}

Result<LayoutHints> ReadHints(MsgpackCursor& in) {
  LayoutHints hints;
  if (in.NextIsNil()) {
    LMC_RETURN_IF_ERROR(in.ReadNil("layout_hints"));
    return hints;
  }
  LMC_RETURN_IF_ERROR(in.ReadFields("layout_hints", [&](std::string_view name) -> Result<bool> {
    if (name == "kv_layout") {
      LMC_ASSIGN_OR_RETURN(const std::string_view v, in.ReadStr("kv_layout"));
      hints.kv_layout = std::string(v);
    } else if (name == "num_kv_heads" || name == "tokens_per_block" || name == "head_dim") {
      LMC_ASSIGN_OR_RETURN(const std::int64_t v, in.ReadInt(name));
      (name == "num_kv_heads" ? hints.num_kv_heads
                              : name == "tokens_per_block" ? hints.tokens_per_block : hints.head_dim) = v;
    } else {
      return false;
    }
    return true;
  }));
  return hints;
}

// engine_type is an enum's value (str or int) or None: checked for its type only.
Status SkipEngineType(MsgpackCursor& in) {
  if (in.NextIsNil()) return in.ReadNil("engine_type");
  if (in.NextIsStr()) return in.ReadStr("engine_type").status();
  return in.ReadInt("engine_type").status();
}

}  // namespace

Result<KvCacheRegistration> DecodeKvCacheRegistration(std::span<const std::string_view> frames) {
  if (frames.size() != 7) {
    return Status(ErrorCode::kMalformedRequest,
                  "register_kv_cache takes 7 payload frames, got " + std::to_string(frames.size()));
  }
  KvCacheRegistration r;
  LMC_ASSIGN_OR_RETURN(r.instance_id, DecodeInt(frames[0], "instance_id"));
  LMC_ASSIGN_OR_RETURN(r.layers, DecodeWhole<std::vector<DeviceIpcWrapper>>(frames[1], "kv_cache", ReadKvCache));
  LMC_ASSIGN_OR_RETURN(r.model_name, DecodeString(frames[2], "model_name"));
  LMC_ASSIGN_OR_RETURN(r.world_size, DecodeInt(frames[3], "world_size"));
  LMC_RETURN_IF_ERROR(DecodeWhole<bool>(frames[4], "engine_type", [](MsgpackCursor& in) -> Result<bool> {
                        LMC_RETURN_IF_ERROR(SkipEngineType(in));
                        return true;
                      }).status());
  LMC_ASSIGN_OR_RETURN(r.hints, DecodeWhole<LayoutHints>(frames[5], "layout_hints", ReadHints));
  LMC_ASSIGN_OR_RETURN(r.engine_groups,
                       DecodeWhole<std::size_t>(frames[6], "engine_group_infos",
                                                [](MsgpackCursor& in) -> Result<std::size_t> {
                                                  if (in.NextIsNil()) {
                                                    LMC_RETURN_IF_ERROR(in.ReadNil("engine_group_infos"));
                                                    return std::size_t{0};
                                                  }
                                                  LMC_ASSIGN_OR_RETURN(const std::uint32_t n, in.ReadArrayHeader("engine_group_infos"));
                                                  for (std::uint32_t i = 0; i < n; ++i) LMC_RETURN_IF_ERROR(in.Skip());
                                                  return std::size_t{n};
                                                }));
  return r;
}

Result<std::vector<std::int32_t>> DecodeBlockIds(std::string_view frame) {
  return DecodeWhole<std::vector<std::int32_t>>(frame, "block_ids", [](MsgpackCursor& in) -> Result<std::vector<std::int32_t>> {
    LMC_ASSIGN_OR_RETURN(std::uint32_t count, in.ReadArrayHeader("block_ids"));
    const bool grouped = count > 0 && in.NextIsArray();
    if (grouped) {
      if (count > 1) {
        return Status(ErrorCode::kNotSupported, "block_ids of " + std::to_string(count) +
                                                    " KV groups: hybrid models are not served");
      }
      LMC_ASSIGN_OR_RETURN(count, in.ReadArrayHeader("block_ids[0]"));
    }
    std::vector<std::int32_t> ids;
    ids.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) {
      LMC_ASSIGN_OR_RETURN(const std::int64_t id, in.ReadInt("block_ids"));
      if (id < std::numeric_limits<std::int32_t>::min() || id > std::numeric_limits<std::int32_t>::max()) {
        return Status(ErrorCode::kInvalidArgument, "block id " + std::to_string(id) + " is out of range");
      }
      ids.push_back(static_cast<std::int32_t>(id));
    }
    return ids;
  });
}

Result<std::array<std::uint8_t, kEventHandleBytes>> DecodeEventHandle(std::string_view frame) {
  LMC_ASSIGN_OR_RETURN(const std::string bytes, DecodeBytes(frame, "event_ipc_handle"));
  if (bytes.size() != kEventHandleBytes) {
    return Status(ErrorCode::kInvalidArgument, "event_ipc_handle is " + std::to_string(bytes.size()) +
                                                   " bytes, not 64 (a cudaIpcEventHandle_t)");
  }
  std::array<std::uint8_t, kEventHandleBytes> handle{};
  std::memcpy(handle.data(), bytes.data(), handle.size());
  return handle;
}

std::string EncodeEventReply(const std::array<std::uint8_t, kEventHandleBytes>& handle, bool success) {
  return Encoder()
      .Array(2)
      .Bin(std::string_view(reinterpret_cast<const char*>(handle.data()), handle.size()))
      .Bool(success)
      .Take();
}

}  // namespace lmcache::protocol
