// S3ObjectName: the name of an object in the bucket, the reference's s3
// adapter's naming, so an operator (and the reference's listing) reads our
// bucket as theirs:
//   <prefix><model>@<kv_rank, %08x>@<object group, hex>@<chunk hash, hex>[@<salt>]
// Keys of ours the reference has no notion of add fields it skips (its
// parser takes 4 or 5): a layout namespace is "@<salt, maybe empty>@L<n>",
// tags then "@T<canonical tags>". Model names, salts and tags never hold
// '@' (object_key.h), so the name parses back to exactly its key, which the
// startup listing needs (a name that does not parse is someone else's and
// is left alone). A name longer than S3 allows (1024 bytes) is
// "<prefix>h-<XXH3-128 of the long name, hex>": found by its key, never
// listed back (the object's header still names the full key).
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "store/object_key.h"

namespace lmcache::tier {

inline constexpr std::size_t kMaxS3ObjectName = 1024;

std::string S3ObjectName(std::string_view prefix, const store::ObjectKey& key);
// The key `name` (under `prefix`) names; nullopt for a name of another shape.
std::optional<store::ObjectKey> ParseS3ObjectName(std::string_view prefix, std::string_view name);

}  // namespace lmcache::tier
