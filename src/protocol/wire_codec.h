// WireCodec: msgpack frames <-> the typed payloads of lmcache/messages.h.
//
// The one place that knows how each message looks on the wire: the server
// decodes requests and encodes replies with it, the client library encodes
// requests and decodes replies, tests and benchmarks build frames with it.
// Decoding follows the reference's msgspec rules: maps keyed by field name,
// unknown keys ignored, missing optional fields defaulted, missing required
// fields and wrong types refused with a message naming the field, integers
// accept booleans, floats accept integers, strings must be UTF-8. Decoders
// read in place (MsgpackCursor): a request costs memory in proportion to
// what is kept from it (e.g. 4 bytes per token), never to the shape of what
// it sends, and trailing bytes after a value are an error.
// Thread-safety: stateless functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"
#include "lmcache/messages.h"
#include "lmcache/status.h"

namespace lmcache::protocol {

using msgpk::Encoder;

// Bounds on a key, checked while it is decoded (before anything is kept).
struct KeyLimits {
  std::size_t max_tokens = 4u << 20;
  std::size_t max_model_name_bytes = 1024;
  std::size_t max_request_id_bytes = 4096;
  std::size_t max_cache_salt_bytes = 128;
  std::size_t max_tag_bytes = 128;  // a request tag's name, and its value
};

// How request_configs names a request tag: "lmcache.tag.<name>".
inline constexpr std::string_view kTagPrefix = "lmcache.tag.";
// The reference's load controls in request_configs (IpcKey::skip_load,
// IpcKey::engine_computed_tokens).
inline constexpr std::string_view kSkipLoadConfig = "lmcache.skip_load";
inline constexpr std::string_view kEngineComputedTokensHint = "lmcache.hint.engine_computed_tokens";

// Runs `read` over the whole frame: it must consume exactly one value.
template <typename T, typename Read>
Result<T> DecodeWhole(std::string_view frame, std::string_view what, Read read) {
  const msgpk::DecodeLimits& limits = msgpk::DefaultDecodeLimits();
  if (frame.size() > limits.max_frame_bytes) {
    return Status(ErrorCode::kTooLarge, std::string(what) + ": frame of " +
                                            std::to_string(frame.size()) + " bytes exceeds " +
                                            std::to_string(limits.max_frame_bytes));
  }
  if (frame.empty()) return msgpk::Malformed(what, "empty frame");
  msgpk::MsgpackCursor in(frame, limits);
  LMC_ASSIGN_OR_RETURN(T value, read(in));
  if (!in.AtEnd()) return msgpk::Malformed(what, "trailing bytes after the value");
  return value;
}

// One frame holding one scalar value.
Result<std::int64_t> DecodeInt(std::string_view frame, std::string_view what);
Result<std::optional<std::int64_t>> DecodeOptionalInt(std::string_view frame,
                                                      std::string_view what);
Result<bool> DecodeBool(std::string_view frame, std::string_view what);
Result<double> DecodeFloat(std::string_view frame, std::string_view what);
Result<std::string> DecodeString(std::string_view frame, std::string_view what);
// bin (or str, which older encoders produce for bytes).
Result<std::string> DecodeBytes(std::string_view frame, std::string_view what);

// `buffer`, when given, is reused (its capacity kept): a long prompt's key is
// hundreds of KiB, and a fresh allocation of that size costs page faults.
std::string EncodeIpcKey(const IpcKey& key, std::string buffer = {});
// The scheduler's form of `key`: worker_id nil whatever the key holds.
std::string EncodeLookupKey(const IpcKey& key, std::string buffer = {});
// Fields the reference requires must be present (worker_id may be nil); a
// missing num_kv_readers decodes as 0, as the reference's default.
Result<IpcKey> DecodeIpcKey(std::string_view frame, const KeyLimits& limits = {});

std::string EncodeEngineContext(const EngineContext& context);
Result<EngineContext> DecodeEngineContext(std::string_view frame);

std::string EncodeRegistration(const Registration& registration);
Result<Registration> DecodeRegistration(std::string_view frame);

void EncodeSlot(Encoder& e, const SlotDescriptor& slot);
std::string EncodePrepareStoreReply(const PrepareStoreReply& reply);
// The same bytes for slots alike but for their offsets (one registration's
// chunks: `shared`'s offset is ignored), without a descriptor per slot (at
// chunk size 1 a reply has 32768, each with its shape's allocation).
std::string EncodePrepareStoreReply(const SlotDescriptor& shared,
                                    std::span<const std::uint64_t> offsets,
                                    std::span<const std::uint64_t> chunk_indices,
                                    std::uint64_t oom_chunks);
Result<PrepareStoreReply> DecodePrepareStoreReply(std::string_view frame);
std::string EncodePrepareRetrieveReply(const PrepareRetrieveReply& reply);
Result<PrepareRetrieveReply> DecodePrepareRetrieveReply(std::string_view frame);

// The extra frame of a failed reply: {"code": int, "message": str}.
std::string EncodeErrorMap(const Status& status);
// The Status an error frame carries (a malformed frame becomes kMalformedRequest).
Status DecodeErrorMap(std::string_view frame);

}  // namespace lmcache::protocol
