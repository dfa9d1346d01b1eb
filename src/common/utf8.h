// UTF-8 validation and repair.
//
// msgpack str values must hold UTF-8: the reference's msgspec rejects
// anything else on decode, and a strict client fails on a reply carrying
// invalid bytes. The codec therefore rejects invalid UTF-8 in request strings
// and the encoder repairs any string it is given (each invalid sequence
// becomes U+FFFD), so text that came from a client can never make a reply
// undecodable.
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <string_view>

namespace lmcache {

// RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(std::string_view text);
// `text` with every invalid sequence replaced by U+FFFD.
std::string RepairUtf8(std::string_view text);

}  // namespace lmcache
