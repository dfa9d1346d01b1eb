// FsKeyCodec: the file name of an object in the fs adapter's directory, the
// reference's codec (spec 13.4), so an operator recognises the files:
//   <model, "/" -> "-SEP-">@<kv_rank as 0x%08x>@<object group, hex>@<chunk hash, hex>[@<salt>].data
// and, for a layout of our own namespace (object_key.h), "@L<namespace>"
// before the suffix (the reference has no such objects).
// A name longer than a file name may be (255 bytes) becomes
// "h-<XXH3-128 of the long name, hex>.data"; the file's header still names
// the full key, so nothing is lost. Names are never parsed back: at startup
// the header says what a file holds, and a file whose name is not the name
// of that key is removed.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "store/object_key.h"

namespace lmcache::tier {

inline constexpr std::string_view kObjectFileSuffix = ".data";

std::string ObjectFileName(const store::ObjectKey& key);

// Whether `name` has the shape of a name ObjectFileName makes (any key's):
// the fs adapter deletes nothing else in its directory.
bool IsObjectFileName(std::string_view name);

// A temporary file's name: "<pid>-<n>.tmp" (the only names the adapter
// removes from its .tmp directory).
std::string TemporaryFileName(long pid, std::uint64_t n);
bool IsTemporaryFileName(std::string_view name);

}  // namespace lmcache::tier
