// Codec: msgpack frames <-> the typed values of the protocol.
//
// Decoding is defensive: every frame is parsed with size and depth limits,
// trailing bytes are an error, wrong types are rejected with a message naming
// the field, and nothing here throws (msgpack-c's exceptions are caught and
// turned into kMalformedRequest). Maps keyed by field name follow the
// reference's msgspec rules: unknown keys are ignored, missing optional fields
// take their defaults, missing required fields are an error. Integers accept
// booleans (msgspec coerces), floats accept integers.
//
// Thread-safety: stateless functions; an Encoder is a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/msgpack_codec.h"
#include "lmcache/status.h"
#include "server/messages.h"
#include "server/operations.h"

namespace lmcache::server {

using mp::DecodeLimits;
using mp::DefaultDecodeLimits;
using mp::Encoder;

// The operation frame: an integer id from the frozen table, or a name.
Result<OpSpec> DecodeOperation(std::string_view frame);

Result<std::int64_t> DecodeInt(std::string_view frame, std::string_view what);
Result<std::optional<std::int64_t>> DecodeOptionalInt(std::string_view frame,
                                                      std::string_view what);
Result<bool> DecodeBool(std::string_view frame, std::string_view what);
Result<double> DecodeFloat(std::string_view frame, std::string_view what);
Result<std::string> DecodeString(std::string_view frame, std::string_view what);
// bin (or str, which older encoders produce for bytes).
Result<std::string> DecodeBytes(std::string_view frame, std::string_view what);
Result<IpcKey> DecodeIpcKey(std::string_view frame);
Result<RegisterContextPayload> DecodeRegisterContext(std::string_view frame);

// Frame 3 of a failed request: the operation's failure value (operations.h).
std::string EncodeFailureValue(FailureValue failure, std::string_view message);
// Frame 4 of a failed request: {"code": <int>, "message": <str>}.
std::string EncodeErrorMap(const Status& status);

}  // namespace lmcache::server
