// The two spellings of one object's name across the fleet: the store's
// ObjectKey and the reference's wire ObjectKey (protocol/p2p_codec.h),
// converted both ways in this one place: by the owner (a peer's keys to
// the store's) and by the requester (ours to the wire).
//
// Thread-safety: pure functions.
#pragma once

#include "protocol/p2p_codec.h"
#include "store/object_key.h"

namespace lmcache::fleet {

// The wire key of `key`, with our own fields (layout namespace, tags) set.
protocol::P2pObjectKey ToP2pObjectKey(const store::ObjectKey& key);
// The store's key a peer's key names; not checked (the store's rules are
// ValidateObjectKey and ValidateCanonicalTags).
store::ObjectKey FromP2pObjectKey(const protocol::P2pObjectKey& key);

}  // namespace lmcache::fleet
