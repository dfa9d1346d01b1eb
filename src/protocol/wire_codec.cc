#include "protocol/wire_codec.h"

#include "common/msgpack_cursor.h"
#include "protocol/decode_helpers.h"

namespace lmcache::protocol {
namespace {

using msgpk::Malformed;
using msgpk::MsgpackCursor;

Result<SlotDescriptor> ReadSlot(MsgpackCursor& in) {
  SlotDescriptor slot;
  RequiredFields required;
  LMC_RETURN_IF_ERROR(in.ReadFields("slot", [&](std::string_view name) -> Result<bool> {
    if (name == "offset") {
      LMC_ASSIGN_OR_RETURN(slot.offset, in.ReadUint("slot.offset"));
      required.Saw(0);
    } else if (name == "length") {
      LMC_ASSIGN_OR_RETURN(slot.length, in.ReadUint("slot.length"));
      required.Saw(1);
    } else if (name == "shape") {
      LMC_ASSIGN_OR_RETURN(slot.shape, IntArray(in, "slot.shape"));
    } else if (name == "dtype") {
      LMC_ASSIGN_OR_RETURN(slot.dtype, Text(in, "slot.dtype", 64));
    } else {
      return false;
    }
    return true;
  }));
  LMC_RETURN_IF_ERROR(required.Check("slot", {"offset", "length"}));
  return slot;
}

Result<std::vector<SlotDescriptor>> ReadSlots(MsgpackCursor& in) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t count, in.ReadArrayHeader("slots"));
  std::vector<SlotDescriptor> slots;
  slots.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    LMC_ASSIGN_OR_RETURN(SlotDescriptor slot, ReadSlot(in));
    slots.push_back(std::move(slot));
  }
  return slots;
}

// The "context" map of a prepare reply: its slots and chunk indices.
Status ReadContext(MsgpackCursor& in, std::vector<SlotDescriptor>* slots,
                   std::vector<std::uint64_t>* indices) {
  return in.ReadFields("context", [&](std::string_view name) -> Result<bool> {
    if (name == "slots") {
      LMC_ASSIGN_OR_RETURN(*slots, ReadSlots(in));
    } else if (name == "chunk_indices" && indices != nullptr) {
      LMC_ASSIGN_OR_RETURN(const std::uint32_t count, in.ReadArrayHeader("chunk_indices"));
      indices->clear();
      for (std::uint32_t i = 0; i < count; ++i) {
        LMC_ASSIGN_OR_RETURN(const std::uint64_t index, in.ReadUint("chunk_indices"));
        indices->push_back(index);
      }
    } else {
      return false;
    }
    return true;
  });
}

}  // namespace

Result<std::int64_t> DecodeInt(std::string_view frame, std::string_view what) {
  return DecodeWhole<std::int64_t>(frame, what,
                                   [what](MsgpackCursor& in) { return in.ReadInt(what); });
}

Result<std::optional<std::int64_t>> DecodeOptionalInt(std::string_view frame,
                                                      std::string_view what) {
  return DecodeWhole<std::optional<std::int64_t>>(
      frame, what, [what](MsgpackCursor& in) -> Result<std::optional<std::int64_t>> {
        if (in.NextIsNil()) {
          LMC_RETURN_IF_ERROR(in.ReadNil(what));
          return std::optional<std::int64_t>();
        }
        LMC_ASSIGN_OR_RETURN(const std::int64_t value, in.ReadInt(what));
        return std::optional<std::int64_t>(value);
      });
}

Result<bool> DecodeBool(std::string_view frame, std::string_view what) {
  return DecodeWhole<bool>(frame, what, [what](MsgpackCursor& in) { return in.ReadBool(what); });
}

Result<double> DecodeFloat(std::string_view frame, std::string_view what) {
  return DecodeWhole<double>(frame, what,
                             [what](MsgpackCursor& in) { return in.ReadFloat(what); });
}

Result<std::string> DecodeString(std::string_view frame, std::string_view what) {
  return DecodeWhole<std::string>(frame, what, [what](MsgpackCursor& in) -> Result<std::string> {
    LMC_ASSIGN_OR_RETURN(const std::string_view text, in.ReadStr(what));
    return std::string(text);
  });
}

Result<std::string> DecodeBytes(std::string_view frame, std::string_view what) {
  return DecodeWhole<std::string>(frame, what, [what](MsgpackCursor& in) -> Result<std::string> {
    LMC_ASSIGN_OR_RETURN(const std::string_view bytes, in.ReadBytes(what));
    return std::string(bytes);
  });
}

namespace {

std::string EncodeKey(const IpcKey& key, std::optional<std::int64_t> worker_id,
                      std::string buffer) {
  // The longest forms: 5 bytes a token, and the fixed fields' names and values.
  buffer.clear();
  buffer.reserve(key.token_ids.size() * 5 + key.model_name.size() + key.request_id.size() +
                 key.cache_salt.size() + 160);
  Encoder e(std::move(buffer));
  const std::uint32_t configs = static_cast<std::uint32_t>(key.tags.size()) +
                                (key.skip_load ? 1 : 0) + (key.engine_computed_tokens ? 1 : 0);
  e.Map(configs == 0 ? 9 : 10);
  e.Str("model_name").Str(key.model_name);
  e.Str("world_size").Int(key.world_size);
  e.Str("worker_id");
  if (worker_id) {
    e.Int(*worker_id);
  } else {
    e.Nil();
  }
  e.Str("token_ids").UintArray(key.token_ids);
  e.Str("start").Int(key.start);
  e.Str("end").Int(key.end);
  e.Str("request_id").Str(key.request_id);
  e.Str("cache_salt").Str(key.cache_salt);
  e.Str("num_kv_readers").Int(key.num_kv_readers);
  if (configs > 0) {
    e.Str("request_configs").Map(configs);
    for (const auto& [name, value] : key.tags) e.Str(std::string(kTagPrefix) + name).Str(value);
    if (key.skip_load) e.Str(kSkipLoadConfig).Bool(true);
    if (key.engine_computed_tokens) {
      e.Str(kEngineComputedTokensHint).Int(*key.engine_computed_tokens);
    }
  }
  return e.Take();
}

}  // namespace

std::string EncodeIpcKey(const IpcKey& key, std::string buffer) {
  return EncodeKey(key, key.worker_id, std::move(buffer));
}

std::string EncodeLookupKey(const IpcKey& key, std::string buffer) {
  return EncodeKey(key, std::nullopt, std::move(buffer));
}

namespace {

// The entries of a key's request_configs this server acts on: the
// lmcache.tag.* entries and the load controls (IpcKey::skip_load,
// engine_computed_tokens). The others (the reference forwards every
// lmcache.* setting there) are skipped. The tags' own rules are checked with
// the key's range (worker/key_rules.h).
Status ReadRequestConfigs(MsgpackCursor& in, const KeyLimits& limits, IpcKey& key) {
  LMC_ASSIGN_OR_RETURN(const std::uint32_t entries, in.ReadMapHeader("key.request_configs"));
  for (std::uint32_t i = 0; i < entries; ++i) {
    if (!in.NextIsStr()) {
      return Malformed("key.request_configs", "its keys must be strings");
    }
    LMC_ASSIGN_OR_RETURN(const std::string_view name, in.ReadStr("key.request_configs key"));
    if ((name == kSkipLoadConfig || name == kEngineComputedTokensHint) && in.NextIsNil()) {
      LMC_RETURN_IF_ERROR(in.ReadNil("key.request_configs"));  // a load control left unset
      continue;
    }
    if (name == kSkipLoadConfig) {
      LMC_ASSIGN_OR_RETURN(key.skip_load, in.ReadBool("key.request_configs['lmcache.skip_load']"));
      continue;
    }
    if (name == kEngineComputedTokensHint) {
      LMC_ASSIGN_OR_RETURN(
          const std::int64_t tokens,
          in.ReadInt("key.request_configs['lmcache.hint.engine_computed_tokens']"));
      if (tokens < 0) {
        return Malformed("key.request_configs",
                         "'lmcache.hint.engine_computed_tokens' must not be negative");
      }
      key.engine_computed_tokens = tokens;
      continue;
    }
    if (!name.starts_with(kTagPrefix)) {
      LMC_RETURN_IF_ERROR(in.Skip());
      continue;
    }
    if (!in.NextIsStr()) {
      return Malformed("key.request_configs", "the value of '" + std::string(name) +
                                                  "' must be a string");
    }
    LMC_ASSIGN_OR_RETURN(std::string value,
                         Text(in, "key.request_configs tag value", limits.max_tag_bytes));
    if (name.size() - kTagPrefix.size() > limits.max_tag_bytes) {
      return Status(ErrorCode::kTooLarge, "a tag name is longer than " +
                                              std::to_string(limits.max_tag_bytes) + " bytes");
    }
    key.tags[std::string(name.substr(kTagPrefix.size()))] = std::move(value);
  }
  return Status::Ok();
}

}  // namespace

// The hot path of every request: read in place (msgpack-c would build one
// object per token, ~3 ms for a 131072-token prompt).
Result<IpcKey> DecodeIpcKey(std::string_view frame, const KeyLimits& limits) {
  return DecodeWhole<IpcKey>(frame, "key", [&limits](MsgpackCursor& in) -> Result<IpcKey> {
    IpcKey key;
    key.num_kv_readers = 0;  // the wire's default: "not sent"
    bool has_worker = false;
    RequiredFields required;
    LMC_RETURN_IF_ERROR(in.ReadFields("key", [&](std::string_view name) -> Result<bool> {
      if (name == "model_name") {
        LMC_ASSIGN_OR_RETURN(key.model_name,
                             Text(in, "key.model_name", limits.max_model_name_bytes));
        required.Saw(0);
      } else if (name == "world_size") {
        LMC_ASSIGN_OR_RETURN(key.world_size, in.ReadInt("key.world_size"));
        required.Saw(1);
      } else if (name == "token_ids") {
        if (in.NextIsArray()) {
          // Refuse an oversized prompt before its tokens are decoded.
          MsgpackCursor peek = in;
          LMC_ASSIGN_OR_RETURN(const std::uint32_t count, peek.ReadArrayHeader("key.token_ids"));
          if (count > limits.max_tokens) {
            return Status(ErrorCode::kTooLarge, "key has " + std::to_string(count) +
                                                    " tokens; the limit is " +
                                                    std::to_string(limits.max_tokens));
          }
        }
        LMC_ASSIGN_OR_RETURN(key.token_ids, in.ReadUint32Array("key.token_ids"));
        required.Saw(2);
      } else if (name == "start") {
        LMC_ASSIGN_OR_RETURN(key.start, in.ReadInt("key.start"));
        required.Saw(3);
      } else if (name == "end") {
        LMC_ASSIGN_OR_RETURN(key.end, in.ReadInt("key.end"));
        required.Saw(4);
      } else if (name == "request_id") {
        LMC_ASSIGN_OR_RETURN(key.request_id,
                             Text(in, "key.request_id", limits.max_request_id_bytes));
        required.Saw(5);
      } else if (name == "worker_id") {
        has_worker = true;
        if (in.NextIsNil()) {
          LMC_RETURN_IF_ERROR(in.ReadNil("key.worker_id"));
          key.worker_id.reset();
        } else {
          LMC_ASSIGN_OR_RETURN(key.worker_id, in.ReadInt("key.worker_id"));
        }
      } else if (name == "cache_salt" && !in.NextIsNil()) {
        LMC_ASSIGN_OR_RETURN(key.cache_salt,
                             Text(in, "key.cache_salt", limits.max_cache_salt_bytes));
      } else if (name == "request_configs" && !in.NextIsNil()) {
        LMC_RETURN_IF_ERROR(ReadRequestConfigs(in, limits, key));
      } else if (name == "num_kv_readers" && !in.NextIsNil()) {
        LMC_ASSIGN_OR_RETURN(key.num_kv_readers, in.ReadInt("key.num_kv_readers"));
      } else {
        return false;  // unknown field, or nil for an optional one
      }
      return true;
    }));
    LMC_RETURN_IF_ERROR(required.Check(
        "key", {"model_name", "world_size", "token_ids", "start", "end", "request_id"}));
    if (!has_worker) {
      return Malformed("key", "missing required field 'worker_id' (nil for all ranks)");
    }
    return key;
  });
}

std::string EncodeEngineContext(const EngineContext& c) {
  Encoder e;
  e.Map(8);
  e.Str("instance_id").Int(c.instance_id);
  e.Str("model_name").Str(c.model_name);
  e.Str("world_size").Int(c.world_size);
  e.Str("block_size").Int(c.block_size);
  e.Str("num_layers").Int(c.num_layers);
  e.Str("hidden_dim_size").Int(c.hidden_dim_size);
  e.Str("dtype_str").Str(c.dtype_str);
  e.Str("use_mla").Bool(c.use_mla);
  return e.Take();
}

Result<EngineContext> DecodeEngineContext(std::string_view frame) {
  return DecodeWhole<EngineContext>(frame, "payload", [](MsgpackCursor& in) -> Result<EngineContext> {
    EngineContext c;
    RequiredFields required;
    LMC_RETURN_IF_ERROR(in.ReadFields("payload", [&](std::string_view name) -> Result<bool> {
      if (name == "instance_id") {
        LMC_ASSIGN_OR_RETURN(c.instance_id, in.ReadInt("payload.instance_id"));
        required.Saw(0);
      } else if (name == "model_name") {
        LMC_ASSIGN_OR_RETURN(c.model_name, Text(in, "payload.model_name", 1024));
        required.Saw(1);
      } else if (name == "world_size") {
        LMC_ASSIGN_OR_RETURN(c.world_size, in.ReadInt("payload.world_size"));
        required.Saw(2);
      } else if (name == "block_size") {
        LMC_ASSIGN_OR_RETURN(c.block_size, in.ReadInt("payload.block_size"));
        required.Saw(3);
      } else if (name == "num_layers") {
        LMC_ASSIGN_OR_RETURN(c.num_layers, in.ReadInt("payload.num_layers"));
        required.Saw(4);
      } else if (name == "hidden_dim_size") {
        LMC_ASSIGN_OR_RETURN(c.hidden_dim_size, in.ReadInt("payload.hidden_dim_size"));
        required.Saw(5);
      } else if (name == "dtype_str") {
        LMC_ASSIGN_OR_RETURN(c.dtype_str, Text(in, "payload.dtype_str", 64));
        required.Saw(6);
      } else if (name == "use_mla") {
        LMC_ASSIGN_OR_RETURN(c.use_mla, in.ReadBool("payload.use_mla"));
        required.Saw(7);
      } else {
        return false;
      }
      return true;
    }));
    LMC_RETURN_IF_ERROR(required.Check("payload",
                                       {"instance_id", "model_name", "world_size", "block_size",
                                        "num_layers", "hidden_dim_size", "dtype_str", "use_mla"}));
    return c;
  });
}

std::string EncodeRegistration(const Registration& r) {
  Encoder e;
  e.Map(5);
  e.Str("shm_name").Str(r.shm_name);
  e.Str("pool_size").Uint(r.pool_size);
  e.Str("boot_id").Str(r.boot_id);
  e.Str("object_bytes").Uint(r.object_bytes);
  e.Str("error");
  if (r.error) {
    e.Str(*r.error);
  } else {
    e.Nil();
  }
  return e.Take();
}

Result<Registration> DecodeRegistration(std::string_view frame) {
  return DecodeWhole<Registration>(
      frame, "registration", [](MsgpackCursor& in) -> Result<Registration> {
        Registration r;
        LMC_RETURN_IF_ERROR(in.ReadFields("registration", [&](std::string_view name) -> Result<bool> {
          if (name == "shm_name") {
            LMC_ASSIGN_OR_RETURN(r.shm_name, Text(in, "registration.shm_name", 4096));
          } else if (name == "pool_size") {
            LMC_ASSIGN_OR_RETURN(r.pool_size, in.ReadUint("registration.pool_size"));
          } else if (name == "boot_id") {
            LMC_ASSIGN_OR_RETURN(r.boot_id, Text(in, "registration.boot_id", 256));
          } else if (name == "object_bytes") {
            LMC_ASSIGN_OR_RETURN(r.object_bytes, in.ReadUint("registration.object_bytes"));
          } else if (name == "error" && !in.NextIsNil()) {
            LMC_ASSIGN_OR_RETURN(r.error, Text(in, "registration.error", 1u << 20));
          } else {
            return false;
          }
          return true;
        }));
        return r;
      });
}

void EncodeSlot(Encoder& e, const SlotDescriptor& slot) {
  e.Map(4);
  e.Str("offset").Uint(slot.offset);
  e.Str("length").Uint(slot.length);
  e.Str("shape").Array(static_cast<std::uint32_t>(slot.shape.size()));
  for (const std::int64_t dim : slot.shape) e.Int(dim);
  e.Str("dtype").Str(slot.dtype);
}

namespace {

// A prepare_store reply from its slots as `encode_slots` writes them.
template <typename EncodeSlots>
std::string EncodePrepareStoreReplyWith(std::size_t slot_count, EncodeSlots encode_slots,
                                        std::span<const std::uint64_t> chunk_indices,
                                        std::uint64_t oom_chunks) {
  Encoder e;
  e.Map(2);
  e.Str("context").Map(2);
  e.Str("slots").Array(static_cast<std::uint32_t>(slot_count));
  encode_slots(e);
  e.Str("chunk_indices").Array(static_cast<std::uint32_t>(chunk_indices.size()));
  for (const std::uint64_t index : chunk_indices) e.Uint(index);
  // Ours: how many chunks found no memory (the reference cannot tell OOM from
  // "already cached"; its clients ignore the unknown key).
  e.Str("oom_chunks").Uint(oom_chunks);
  return e.Take();
}

}  // namespace

std::string EncodePrepareStoreReply(const PrepareStoreReply& reply) {
  return EncodePrepareStoreReplyWith(
      reply.slots.size(),
      [&reply](Encoder& e) {
        for (const SlotDescriptor& slot : reply.slots) EncodeSlot(e, slot);
      },
      reply.chunk_indices, reply.oom_chunks);
}

std::string EncodePrepareStoreReply(const SlotDescriptor& shared,
                                    std::span<const std::uint64_t> offsets,
                                    std::span<const std::uint64_t> chunk_indices,
                                    std::uint64_t oom_chunks) {
  // A slot's fields after its offset, the same in every slot: encoded once.
  SlotDescriptor probe = shared;
  probe.offset = 0;  // one byte
  Encoder one;
  EncodeSlot(one, probe);
  const std::string prefix = Encoder().Map(4).Str("offset").Take();
  const std::string_view tail = std::string_view(one.bytes()).substr(prefix.size() + 1);
  return EncodePrepareStoreReplyWith(
      offsets.size(),
      [&](Encoder& e) {
        for (const std::uint64_t offset : offsets) e.Raw(prefix).Uint(offset).Raw(tail);
      },
      chunk_indices, oom_chunks);
}

Result<PrepareStoreReply> DecodePrepareStoreReply(std::string_view frame) {
  return DecodeWhole<PrepareStoreReply>(
      frame, "prepare_store reply", [](MsgpackCursor& in) -> Result<PrepareStoreReply> {
        PrepareStoreReply reply;
        bool has_context = false;
        LMC_RETURN_IF_ERROR(in.ReadFields("prepare_store reply", [&](std::string_view name) -> Result<bool> {
          if (name == "context") {
            has_context = true;
            LMC_RETURN_IF_ERROR(ReadContext(in, &reply.slots, &reply.chunk_indices));
          } else if (name == "oom_chunks") {
            LMC_ASSIGN_OR_RETURN(reply.oom_chunks, in.ReadUint("oom_chunks"));
          } else {
            return false;
          }
          return true;
        }));
        if (!has_context) return Malformed("prepare_store reply", "no context");
        if (reply.slots.size() != reply.chunk_indices.size()) {
          return Malformed("prepare_store reply", "slots and chunk_indices differ in length");
        }
        return reply;
      });
}

std::string EncodePrepareRetrieveReply(const PrepareRetrieveReply& reply) {
  Encoder e;
  e.Map(3);
  e.Str("success").Bool(reply.success);
  e.Str("data").Bin("");
  e.Str("context");
  if (!reply.success) {
    e.Map(0);
    return e.Take();
  }
  e.Map(1).Str("slots").Array(static_cast<std::uint32_t>(reply.slots.size()));
  for (const SlotDescriptor& slot : reply.slots) EncodeSlot(e, slot);
  return e.Take();
}

Result<PrepareRetrieveReply> DecodePrepareRetrieveReply(std::string_view frame) {
  return DecodeWhole<PrepareRetrieveReply>(
      frame, "prepare_retrieve reply", [](MsgpackCursor& in) -> Result<PrepareRetrieveReply> {
        PrepareRetrieveReply reply;
        bool has_success = false;
        LMC_RETURN_IF_ERROR(
            in.ReadFields("prepare_retrieve reply", [&](std::string_view name) -> Result<bool> {
              if (name == "success") {
                has_success = true;
                LMC_ASSIGN_OR_RETURN(reply.success, in.ReadBool("success"));
              } else if (name == "context") {
                LMC_RETURN_IF_ERROR(ReadContext(in, &reply.slots, nullptr));
              } else {
                return false;
              }
              return true;
            }));
        if (!has_success) return Malformed("prepare_retrieve reply", "no success field");
        return reply;
      });
}

std::string EncodeErrorMap(const Status& status) {
  Encoder e;
  e.Map(2);
  e.Str("code").Int(static_cast<std::int64_t>(status.code()));
  e.Str("message").Str(status.message());
  return e.Take();
}

Status DecodeErrorMap(std::string_view frame) {
  struct Fields {
    std::int64_t code = static_cast<std::int64_t>(ErrorCode::kInternal);
    std::string message = "server error without a message";
  };
  auto decoded = DecodeWhole<Fields>(frame, "error", [](MsgpackCursor& in) -> Result<Fields> {
    Fields f;
    LMC_RETURN_IF_ERROR(in.ReadFields("error", [&](std::string_view name) -> Result<bool> {
      if (name == "code") {
        LMC_ASSIGN_OR_RETURN(f.code, in.ReadInt("error.code"));
      } else if (name == "message") {
        LMC_ASSIGN_OR_RETURN(f.message, Text(in, "error.message", 1u << 20));
      } else {
        return false;
      }
      return true;
    }));
    return f;
  });
  if (!decoded.ok()) return decoded.status();
  if (decoded->code <= 0 || decoded->code > 0xffff) {
    decoded->code = static_cast<std::int64_t>(ErrorCode::kInternal);
  }
  return Status(static_cast<ErrorCode>(decoded->code), decoded->message);
}

}  // namespace lmcache::protocol
