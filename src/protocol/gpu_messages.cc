#include "protocol/gpu_messages.h"

#include <cstring>
#include <limits>

#include "common/msgpack_cursor.h"
#include "protocol/wire_codec.h"

namespace lmcache::protocol {
namespace {

using msgpk::Malformed;
using msgpk::MsgpackCursor;

constexpr std::size_t kMinRegisterFrames = 5;

Status CountOutOfRange(const std::string& what, std::size_t count, std::size_t max) {
  return Status(ErrorCode::kInvalidArgument, what + " holds " + std::to_string(count) +
                                                 " entries (want 1 to " + std::to_string(max) + ")");
}

Result<DeviceIpcWrapper> ReadWrapper(MsgpackCursor& in, const std::string& what) {
  LMC_ASSIGN_OR_RETURN(const auto ext, in.ReadExt(what));
  if (ext.first != 1) {
    return Malformed(what, "ext type " + std::to_string(ext.first) + ", not 1 (a DeviceIPCWrapper)");
  }
  Result<DeviceIpcWrapper> wrapper = DecodeDeviceIpcWrapper(ext.second);
  if (!wrapper.ok()) return wrapper.status().WithContext(what);
  return wrapper;
}

// kv_cache: a list of wrappers, or one bare wrapper (a cross-layer tensor).
Status ReadKvCache(MsgpackCursor& in, KvCacheRegistration* r) {
  if (!in.NextIsArray()) {
    r->cross_layer = true;
    LMC_ASSIGN_OR_RETURN(DeviceIpcWrapper only, ReadWrapper(in, "kv_cache"));
    r->layers.push_back(std::move(only));
    return Status::Ok();
  }
  LMC_ASSIGN_OR_RETURN(const std::uint32_t count, in.ReadArrayHeader("kv_cache"));
  if (count == 0 || count > kMaxKvLayers) return CountOutOfRange("kv_cache", count, kMaxKvLayers);
  for (std::uint32_t i = 0; i < count; ++i) {
    LMC_ASSIGN_OR_RETURN(DeviceIpcWrapper layer, ReadWrapper(in, "kv_cache[" + std::to_string(i) + "]"));
    r->layers.push_back(std::move(layer));
  }
  return Status::Ok();
}

Result<LayoutHints> ReadHints(MsgpackCursor& in) {
  LayoutHints hints;
  if (in.NextIsNil()) {
    LMC_RETURN_IF_ERROR(in.ReadNil("layout_hints"));
    return hints;
  }
  LMC_RETURN_IF_ERROR(in.ReadFields("layout_hints", [&](std::string_view name) -> Result<bool> {
    if (in.NextIsNil()) return false;
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

Result<std::vector<std::int64_t>> ReadIndices(MsgpackCursor& in, const std::string& what) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t n, in.ReadArrayHeader(what));
  if (n > kMaxKvLayers) return CountOutOfRange(what, n, kMaxKvLayers);
  std::vector<std::int64_t> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    LMC_ASSIGN_OR_RETURN(const std::int64_t v, in.ReadInt(what));
    out.push_back(v);
  }
  return out;
}

Result<EngineGroupInfo> ReadGroup(MsgpackCursor& in, const std::string& what) {
  EngineGroupInfo g;
  LMC_RETURN_IF_ERROR(in.ReadFields(what, [&](std::string_view name) -> Result<bool> {
    if (name == "null_block_id") {
      if (in.NextIsNil()) {
        LMC_RETURN_IF_ERROR(in.ReadNil(name));
        g.null_block_id.reset();
      } else {
        LMC_ASSIGN_OR_RETURN(g.null_block_id, in.ReadInt(name));
      }
    } else if (in.NextIsNil()) {
      return false;  // a default
    } else if (name == "engine_group_id") {
      LMC_ASSIGN_OR_RETURN(g.engine_group_id, in.ReadInt(name));
    } else if (name == "layer_indices") {
      LMC_ASSIGN_OR_RETURN(g.layer_indices, ReadIndices(in, what + ".layer_indices"));
    } else if (name == "tokens_per_block") {
      LMC_ASSIGN_OR_RETURN(g.tokens_per_block, in.ReadInt(name));
    } else if (name == "sw_size_tokens") {
      LMC_ASSIGN_OR_RETURN(g.sw_size_tokens, in.ReadInt(name));
    } else if (name == "recurrent_state") {
      LMC_ASSIGN_OR_RETURN(g.recurrent_state, in.ReadBool(name));
    } else {
      return false;
    }
    return true;
  }));
  return g;
}

Result<std::vector<EngineGroupInfo>> ReadGroups(MsgpackCursor& in) {
  std::vector<EngineGroupInfo> groups;
  if (in.NextIsNil()) {
    LMC_RETURN_IF_ERROR(in.ReadNil("engine_group_infos"));
    return groups;
  }
  LMC_ASSIGN_OR_RETURN(const std::uint32_t n, in.ReadArrayHeader("engine_group_infos"));
  if (n > kMaxKvGroups) return CountOutOfRange("engine_group_infos", n, kMaxKvGroups);
  for (std::uint32_t i = 0; i < n; ++i) {
    LMC_ASSIGN_OR_RETURN(EngineGroupInfo g, ReadGroup(in, "engine_group_infos[" + std::to_string(i) + "]"));
    groups.push_back(std::move(g));
  }
  return groups;
}

// engine_type is an enum's value (str or int) or None.
Result<std::string> ReadEngineType(MsgpackCursor& in) {
  if (in.NextIsNil()) {
    LMC_RETURN_IF_ERROR(in.ReadNil("engine_type"));
    return std::string();
  }
  if (in.NextIsStr()) {
    LMC_ASSIGN_OR_RETURN(const std::string_view v, in.ReadStr("engine_type"));
    return std::string(v);
  }
  LMC_ASSIGN_OR_RETURN(const std::int64_t v, in.ReadInt("engine_type"));
  return std::to_string(v);
}

}  // namespace

Result<KvCacheRegistration> DecodeKvCacheRegistration(std::span<const std::string_view> frames) {
  if (frames.size() < kMinRegisterFrames) {
    return Status(ErrorCode::kMalformedRequest,
                  "register_kv_cache takes 5 to 7 payload frames, got " + std::to_string(frames.size()));
  }
  KvCacheRegistration r;
  LMC_ASSIGN_OR_RETURN(r.instance_id, DecodeInt(frames[0], "instance_id"));
  LMC_RETURN_IF_ERROR(DecodeWhole<bool>(frames[1], "kv_cache", [&r](MsgpackCursor& in) -> Result<bool> {
                        LMC_RETURN_IF_ERROR(ReadKvCache(in, &r));
                        return true;
                      }).status());
  LMC_ASSIGN_OR_RETURN(r.model_name, DecodeString(frames[2], "model_name"));
  LMC_ASSIGN_OR_RETURN(r.world_size, DecodeInt(frames[3], "world_size"));
  LMC_ASSIGN_OR_RETURN(r.engine_type, DecodeWhole<std::string>(frames[4], "engine_type", ReadEngineType));
  if (frames.size() > 5) {
    LMC_ASSIGN_OR_RETURN(r.hints, DecodeWhole<LayoutHints>(frames[5], "layout_hints", ReadHints));
  }
  if (frames.size() > 6) {
    LMC_ASSIGN_OR_RETURN(r.groups, DecodeWhole<std::vector<EngineGroupInfo>>(
                                       frames[6], "engine_group_infos", ReadGroups));
  }
  return r;
}

Result<GroupBlockIds> DecodeBlockIds(std::string_view frame) {
  return DecodeWhole<GroupBlockIds>(frame, "block_ids", [](MsgpackCursor& in) -> Result<GroupBlockIds> {
    LMC_ASSIGN_OR_RETURN(const std::uint32_t count, in.ReadArrayHeader("block_ids"));
    GroupBlockIds groups;
    const bool grouped = count > 0 && in.NextIsArray();
    if (grouped && count > kMaxKvGroups) return CountOutOfRange("block_ids", count, kMaxKvGroups);
    const std::uint32_t lists = grouped ? count : 1;
    for (std::uint32_t g = 0; g < lists; ++g) {
      std::uint32_t ids = count;
      if (grouped) {
        LMC_ASSIGN_OR_RETURN(ids, in.ReadArrayHeader("block_ids[" + std::to_string(g) + "]"));
      }
      std::vector<std::int32_t>& out = groups.emplace_back();
      out.reserve(ids);
      for (std::uint32_t i = 0; i < ids; ++i) {
        LMC_ASSIGN_OR_RETURN(const std::int64_t id, in.ReadInt("block_ids"));
        if (id < std::numeric_limits<std::int32_t>::min() || id > std::numeric_limits<std::int32_t>::max()) {
          return Status(ErrorCode::kInvalidArgument, "block id " + std::to_string(id) + " is out of range");
        }
        out.push_back(static_cast<std::int32_t>(id));
      }
    }
    return groups;
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
