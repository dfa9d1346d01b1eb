#include "protocol/p2p_codec.h"

#include "common/msgpack_codec.h"
#include "protocol/decode_helpers.h"
#include "protocol/device_ipc_wrapper.h"
#include "protocol/wire_codec.h"

namespace lmcache::protocol {
namespace {

Status TooMany(std::string_view what, std::size_t count, std::size_t limit) {
  return Status(ErrorCode::kTooLarge, std::string(what) + ": " + std::to_string(count) +
                                          " entries; the limit is " + std::to_string(limit));
}

Result<std::uint32_t> BoundedArray(MsgpackCursor& in, std::string_view what, std::size_t limit) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t count, in.ReadArrayHeader(what));
  if (count > limit) return TooMany(what, count, limit);
  return count;
}

// ObjectKey (spec 4.2): chunk_hash, model_name and kv_rank required.
Result<P2pObjectKey> ReadKey(MsgpackCursor& in, const P2pLimits& limits) {
  P2pObjectKey key;
  RequiredFields required;
  LMC_RETURN_IF_ERROR(in.ReadFields("ObjectKey", [&](std::string_view name) -> Result<bool> {
    if (name == "chunk_hash") {
      LMC_ASSIGN_OR_RETURN(const std::string_view hash, in.ReadBytes("ObjectKey.chunk_hash"));
      if (hash.size() != kChunkHashBytes) {
        return Malformed("ObjectKey.chunk_hash", "must be 32 bytes, not " +
                                                     std::to_string(hash.size()));
      }
      key.chunk_hash = std::string(hash);
      required.Saw(0);
    } else if (name == "model_name") {
      LMC_ASSIGN_OR_RETURN(key.model_name,
                           Text(in, "ObjectKey.model_name", limits.max_model_name_bytes));
      required.Saw(1);
    } else if (name == "kv_rank") {
      LMC_ASSIGN_OR_RETURN(key.kv_rank, in.ReadInt("ObjectKey.kv_rank"));
      required.Saw(2);
    } else if (name == "object_group_id") {
      LMC_ASSIGN_OR_RETURN(key.object_group_id, in.ReadInt("ObjectKey.object_group_id"));
      if (key.object_group_id < 0) {
        return Malformed("ObjectKey.object_group_id", "must not be negative");
      }
    } else if (name == "cache_salt") {
      LMC_ASSIGN_OR_RETURN(key.cache_salt,
                           Text(in, "ObjectKey.cache_salt", limits.max_cache_salt_bytes));
    } else if (name == "lmc_layout_namespace") {
      LMC_ASSIGN_OR_RETURN(const std::int64_t ns, in.ReadInt("ObjectKey.lmc_layout_namespace"));
      if (ns < 0 || ns > UINT32_MAX) {
        return Malformed("ObjectKey.lmc_layout_namespace", "must fit 32 unsigned bits");
      }
      key.layout_namespace = static_cast<std::uint32_t>(ns);
    } else if (name == "lmc_tags") {
      LMC_ASSIGN_OR_RETURN(key.tags, Text(in, "ObjectKey.lmc_tags", limits.max_tags_bytes));
    } else {
      return false;
    }
    return true;
  }));
  LMC_RETURN_IF_ERROR(required.Check("ObjectKey", {"chunk_hash", "model_name", "kv_rank"}));
  return key;
}

// MemoryLayoutDesc (spec 4.2): shapes and dtypes required, of equal length.
Result<P2pLayout> ReadLayout(MsgpackCursor& in, const P2pLimits& limits) {
  P2pLayout layout;
  RequiredFields required;
  LMC_RETURN_IF_ERROR(
      in.ReadFields("MemoryLayoutDesc", [&](std::string_view name) -> Result<bool> {
        if (name == "shapes") {
          LMC_ASSIGN_OR_RETURN(const std::uint32_t tensors,
                               BoundedArray(in, "MemoryLayoutDesc.shapes", limits.max_tensors));
          for (std::uint32_t i = 0; i < tensors; ++i) {
            LMC_ASSIGN_OR_RETURN(const std::uint32_t dims,
                                 BoundedArray(in, "MemoryLayoutDesc.shapes[]", limits.max_dims));
            std::vector<std::int64_t>& shape = layout.shapes.emplace_back();
            for (std::uint32_t d = 0; d < dims; ++d) {
              LMC_ASSIGN_OR_RETURN(const std::int64_t dim, in.ReadInt("MemoryLayoutDesc.shapes"));
              if (dim < 0) return Malformed("MemoryLayoutDesc.shapes", "a dimension is negative");
              shape.push_back(dim);
            }
          }
          required.Saw(0);
        } else if (name == "dtypes") {
          LMC_ASSIGN_OR_RETURN(const std::uint32_t tensors,
                               BoundedArray(in, "MemoryLayoutDesc.dtypes", limits.max_tensors));
          for (std::uint32_t i = 0; i < tensors; ++i) {
            LMC_ASSIGN_OR_RETURN(std::string dtype,
                                 Text(in, "MemoryLayoutDesc.dtypes", limits.max_dtype_bytes));
            layout.dtypes.push_back(std::move(dtype));
          }
          required.Saw(1);
        } else {
          return false;
        }
        return true;
      }));
  LMC_RETURN_IF_ERROR(required.Check("MemoryLayoutDesc", {"shapes", "dtypes"}));
  if (layout.shapes.size() != layout.dtypes.size()) {
    return Malformed("MemoryLayoutDesc", std::to_string(layout.shapes.size()) + " shapes but " +
                                             std::to_string(layout.dtypes.size()) + " dtypes");
  }
  return layout;
}

// The group map: int keys. An empty map is a lookup with no group.
Result<P2pLayouts> ReadGroupLayouts(MsgpackCursor& in, std::uint32_t groups,
                                    const P2pLimits& limits) {
  if (groups > limits.max_groups) return TooMany("group_layout_descs", groups, limits.max_groups);
  P2pLayouts layouts;
  for (std::uint32_t i = 0; i < groups; ++i) {
    if (!in.NextIsInt()) return Malformed("group_layout_descs", "its keys must be ints");
    LMC_ASSIGN_OR_RETURN(const std::int64_t group, in.ReadInt("group_layout_descs key"));
    if (group < 0) return Malformed("group_layout_descs", "a group id is negative");
    LMC_ASSIGN_OR_RETURN(P2pLayout layout, ReadLayout(in, limits));
    if (!layouts.by_group.emplace(group, std::move(layout)).second) {
      return Malformed("group_layout_descs", "group " + std::to_string(group) + " twice");
    }
  }
  return layouts;
}

Result<P2pAddress> ReadAddress(MsgpackCursor& in) {
  P2pAddress address;
  RequiredFields required;
  LMC_RETURN_IF_ERROR(
      in.ReadFields("TransferChannelAddress", [&](std::string_view name) -> Result<bool> {
        if (name == "offset") {
          LMC_ASSIGN_OR_RETURN(address.offset, in.ReadInt("TransferChannelAddress.offset"));
          required.Saw(0);
        } else if (name == "size") {
          LMC_ASSIGN_OR_RETURN(address.size, in.ReadInt("TransferChannelAddress.size"));
          required.Saw(1);
        } else {
          return false;
        }
        return true;
      }));
  LMC_RETURN_IF_ERROR(required.Check("TransferChannelAddress", {"offset", "size"}));
  return address;
}

}  // namespace

Result<std::vector<P2pObjectKey>> DecodeP2pKeys(std::string_view frame, const P2pLimits& limits) {
  return DecodeWhole<std::vector<P2pObjectKey>>(
      frame, "keys", [&limits](MsgpackCursor& in) -> Result<std::vector<P2pObjectKey>> {
        LMC_ASSIGN_OR_RETURN(const std::uint32_t count, BoundedArray(in, "keys", limits.max_keys));
        std::vector<P2pObjectKey> keys;
        keys.reserve(count);
        for (std::uint32_t i = 0; i < count; ++i) {
          LMC_ASSIGN_OR_RETURN(P2pObjectKey key, ReadKey(in, limits));
          keys.push_back(std::move(key));
        }
        return keys;
      });
}

Result<P2pLayouts> DecodeP2pLayouts(std::string_view frame, const P2pLimits& limits) {
  return DecodeWhole<P2pLayouts>(
      frame, "group_layout_descs", [&limits](MsgpackCursor& in) -> Result<P2pLayouts> {
        // A single MemoryLayoutDesc is a map keyed by str; the group map by int.
        MsgpackCursor peek = in;
        LMC_ASSIGN_OR_RETURN(const std::uint32_t entries,
                             peek.ReadMapHeader("group_layout_descs"));
        if (entries > 0 && peek.NextIsStr()) {
          P2pLayouts layouts;
          layouts.single = true;
          LMC_ASSIGN_OR_RETURN(P2pLayout layout, ReadLayout(in, limits));
          layouts.by_group.emplace(0, std::move(layout));
          return layouts;
        }
        in = peek;
        return ReadGroupLayouts(in, entries, limits);
      });
}

Result<std::optional<std::vector<P2pAddress>>> DecodeP2pAddresses(std::string_view frame,
                                                                 const P2pLimits& limits) {
  using Reply = std::optional<std::vector<P2pAddress>>;
  return DecodeWhole<Reply>(frame, "addresses", [&limits](MsgpackCursor& in) -> Result<Reply> {
    if (in.NextIsNil()) {
      LMC_RETURN_IF_ERROR(in.ReadNil("addresses"));
      return Reply();
    }
    LMC_ASSIGN_OR_RETURN(const std::uint32_t count,
                         BoundedArray(in, "addresses", limits.max_keys));
    std::vector<P2pAddress> addresses;
    addresses.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) {
      LMC_ASSIGN_OR_RETURN(P2pAddress address, ReadAddress(in));
      addresses.push_back(address);
    }
    return Reply(std::move(addresses));
  });
}

Result<std::uint64_t> P2pLayoutBytes(const P2pLayout& layout) {
  constexpr std::uint64_t kLimit = std::uint64_t{1} << 48;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < layout.shapes.size() && i < layout.dtypes.size(); ++i) {
    const std::optional<std::uint32_t> item = TorchDtypeSize(layout.dtypes[i]);
    if (!item) {
      return Status(ErrorCode::kInvalidArgument,
                    "MemoryLayoutDesc: '" + layout.dtypes[i] + "' is no torch dtype we know");
    }
    std::uint64_t bytes = *item;
    for (const std::int64_t dim : layout.shapes[i]) {
      const auto d = static_cast<std::uint64_t>(dim);
      if (d != 0 && bytes > kLimit / d) {
        return Status(ErrorCode::kInvalidArgument, "MemoryLayoutDesc: an object past 2^48 bytes");
      }
      bytes *= d;
    }
    total += bytes;
    if (total > kLimit) {
      return Status(ErrorCode::kInvalidArgument, "MemoryLayoutDesc: an object past 2^48 bytes");
    }
  }
  return total;
}

std::string EncodeP2pKeys(std::span<const P2pObjectKey> keys) {
  Encoder e;
  e.Array(static_cast<std::uint32_t>(keys.size()));
  for (const P2pObjectKey& key : keys) {
    const bool ns = key.layout_namespace != 0;
    const bool tags = !key.tags.empty();
    e.Map(5 + (ns ? 1 : 0) + (tags ? 1 : 0));
    e.Str("chunk_hash").Bin(key.chunk_hash);
    e.Str("model_name").Str(key.model_name);
    e.Str("kv_rank").Int(key.kv_rank);
    e.Str("object_group_id").Int(key.object_group_id);
    e.Str("cache_salt").Str(key.cache_salt);
    if (ns) e.Str("lmc_layout_namespace").Int(key.layout_namespace);
    if (tags) e.Str("lmc_tags").Str(key.tags);
  }
  return e.Take();
}

namespace {

void WriteLayout(Encoder& e, const P2pLayout& layout) {
  e.Map(2);
  e.Str("shapes").Array(static_cast<std::uint32_t>(layout.shapes.size()));
  for (const std::vector<std::int64_t>& shape : layout.shapes) {
    e.Array(static_cast<std::uint32_t>(shape.size()));
    for (const std::int64_t dim : shape) e.Int(dim);
  }
  e.Str("dtypes").Array(static_cast<std::uint32_t>(layout.dtypes.size()));
  for (const std::string& dtype : layout.dtypes) e.Str(dtype);
}

}  // namespace

std::string EncodeP2pLayouts(const P2pLayouts& layouts) {
  Encoder e;
  if (layouts.single && layouts.by_group.size() == 1) {
    WriteLayout(e, layouts.by_group.begin()->second);
    return e.Take();
  }
  e.Map(static_cast<std::uint32_t>(layouts.by_group.size()));
  for (const auto& [group, layout] : layouts.by_group) {
    e.Int(group);
    WriteLayout(e, layout);
  }
  return e.Take();
}

std::string EncodeP2pAddresses(std::span<const P2pAddress> addresses) {
  Encoder e;
  e.Array(static_cast<std::uint32_t>(addresses.size()));
  for (const P2pAddress& address : addresses) {
    e.Map(4);
    e.Str("offset").Int(address.offset);
    e.Str("size").Int(address.size);
    e.Str("cxl_arena").Nil();
    e.Str("cxl_ttl_seconds").Int(0);
  }
  return e.Take();
}

}  // namespace lmcache::protocol
