// libFuzzer target: every decoder of the wire codec (lmcache/messages.h), of
// the P2P operations' payloads (protocol/p2p_codec.h) and the msgpack cursor
// under them (its token arrays against an item-by-item decode), fed arbitrary bytes. Beyond "no
// crash, no sanitizer report": a key that decodes re-encodes to a frame that decodes to the same
// key, and decoders never accept invalid UTF-8 as a string.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/msgpack_cursor.h"
#include "common/utf8.h"
#include "protocol/p2p_codec.h"
#include "protocol/wire_codec.h"

namespace {

using namespace lmcache;

void Check(bool condition) {
  if (!condition) std::abort();
}

void KeyRoundTrip(std::string_view frame) {
  Result<IpcKey> key = protocol::DecodeIpcKey(frame);
  if (!key.ok()) return;
  Check(IsValidUtf8(key->model_name) && IsValidUtf8(key->request_id) &&
        IsValidUtf8(key->cache_salt));
  IpcKey expected = *key;
  Result<IpcKey> again = protocol::DecodeIpcKey(protocol::EncodeIpcKey(expected));
  Check(again.ok());
  Check(again->model_name == expected.model_name && again->world_size == expected.world_size &&
        again->worker_id == expected.worker_id && again->token_ids == expected.token_ids &&
        again->start == expected.start && again->end == expected.end &&
        again->request_id == expected.request_id && again->cache_salt == expected.cache_salt &&
        again->num_kv_readers == expected.num_kv_readers && again->tags == expected.tags &&
        again->skip_load == expected.skip_load &&
        again->engine_computed_tokens == expected.engine_computed_tokens &&
        expected.engine_computed_tokens.value_or(0) >= 0);
}

// The P2P operations' payloads (a peer is untrusted input): what decodes
// re-encodes to what decodes to the same value.
void P2pRoundTrips(std::string_view frame) {
  if (auto keys = protocol::DecodeP2pKeys(frame); keys.ok()) {
    for (const protocol::P2pObjectKey& key : *keys) {
      Check(key.chunk_hash.size() == protocol::kChunkHashBytes && IsValidUtf8(key.model_name) &&
            IsValidUtf8(key.cache_salt) && key.object_group_id >= 0);
    }
    auto again = protocol::DecodeP2pKeys(protocol::EncodeP2pKeys(*keys));
    Check(again.ok() && *again == *keys);
  }
  if (auto layouts = protocol::DecodeP2pLayouts(frame); layouts.ok()) {
    for (const auto& [group, layout] : layouts->by_group) {
      Check(group >= 0 && layout.shapes.size() == layout.dtypes.size());
    }
    auto again = protocol::DecodeP2pLayouts(protocol::EncodeP2pLayouts(*layouts));
    Check(again.ok() && *again == *layouts);
  }
  if (auto addresses = protocol::DecodeP2pAddresses(frame); addresses.ok() && *addresses) {
    auto again = protocol::DecodeP2pAddresses(protocol::EncodeP2pAddresses(**addresses));
    Check(again.ok() && *again && **again == **addresses);
  }
}

void Walk(std::string_view frame) {
  // The cursor steps over any value within its limits, or stops with an error.
  msgpk::MsgpackCursor in(frame);
  for (int i = 0; i < 64 && !in.AtEnd(); ++i) {
    const std::size_t before = in.position();
    if (!in.Skip().ok()) return;
    Check(in.position() > before && in.position() <= frame.size());
  }
}

// The unsigned items (positive fixint, uint8-64) at `in`, one by one, while
// each is below 2^32: the reference a token array's decoder must agree with.
std::optional<std::vector<std::uint32_t>> UnsignedItems(std::string_view in, std::uint32_t count) {
  std::vector<std::uint32_t> items;
  std::size_t pos = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (pos >= in.size()) return std::nullopt;
    const auto type = static_cast<std::uint8_t>(in[pos]);
    std::size_t bytes = 0;
    if (type <= 0x7f) {
      items.push_back(type);
      pos += 1;
      continue;
    }
    if (type < 0xcc || type > 0xcf) return std::nullopt;
    bytes = std::size_t{1} << (type - 0xcc);
    if (in.size() - pos - 1 < bytes) return std::nullopt;
    std::uint64_t value = 0;
    for (std::size_t b = 0; b < bytes; ++b)
      value = value << 8 | static_cast<std::uint8_t>(in[pos + 1 + b]);
    if (value > UINT32_MAX) return std::nullopt;
    items.push_back(static_cast<std::uint32_t>(value));
    pos += 1 + bytes;
  }
  return items;
}

// Token arrays: the cursor (64-byte windows where the CPU has AVX-512 VBMI)
// against UnsignedItems: the same values, or an error from both. The input's
// first two bytes are the array's length, the rest its items.
void TokenArrayAgrees(std::string_view input) {
  if (input.size() < 2) return;
  const auto count = static_cast<std::uint32_t>(static_cast<std::uint8_t>(input[0]) << 8 |
                                                static_cast<std::uint8_t>(input[1]));
  const std::string frame = msgpk::Encoder().Array(count).Take() + std::string(input.substr(2));
  const auto fast = msgpk::MsgpackCursor(frame).ReadUint32Array("tokens");
  const auto expected = UnsignedItems(input.substr(2), count);
  Check(fast.ok() == expected.has_value());
  if (expected) Check(*fast == *expected);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view frame(reinterpret_cast<const char*>(data), size);
  KeyRoundTrip(frame);
  P2pRoundTrips(frame);
  (void)protocol::DecodeEngineContext(frame);
  (void)protocol::DecodeRegistration(frame);
  (void)protocol::DecodePrepareStoreReply(frame);
  (void)protocol::DecodePrepareRetrieveReply(frame);
  (void)protocol::DecodeErrorMap(frame);
  (void)protocol::DecodeInt(frame, "int");
  (void)protocol::DecodeOptionalInt(frame, "int");
  (void)protocol::DecodeBool(frame, "bool");
  (void)protocol::DecodeFloat(frame, "float");
  if (auto text = protocol::DecodeString(frame, "str"); text.ok()) Check(IsValidUtf8(*text));
  (void)protocol::DecodeBytes(frame, "bytes");
  Walk(frame);
  TokenArrayAgrees(frame);
  return 0;
}
