// LookupLeases: the read leases that lookups hold for their sessions, and
// their end: a retrieve taking over its share of a lookup's locks, a
// session's release (ended, expired, dropped) with its prefetches cancelled,
// and the release of what a closed connection's lookups still hold.
//
// Thread-safety: every method may be called from any thread; a session's
// leases change under its own mutex (session.h).
#pragma once

#include <span>
#include <string_view>

#include "lmcache/status.h"
#include "protocol/wire_codec.h"
#include "worker/session.h"
#include "store/object_table.h"
#include "tier/prefetcher.h"

namespace lmcache::worker {

class LookupLeases {
 public:
  // Every pointer must outlive this object; `prefetcher` may be null.
  LookupLeases(SessionManager* sessions, store::ObjectTable* table, tier::Prefetcher* prefetcher);

  // Read-locks every object of a retrieve or none (kNotFound naming how many
  // are missing) under a new lease of `owner`, taking over this reader's share
  // of the request's lookup locks where the lookup still holds them.
  Result<store::ReadAcquisition> AcquireForRetrieve(const IpcKey& key,
                                                    std::span<const store::ObjectKey> keys,
                                                    store::Owner owner);
  // Releases every lease a session holds (ended, expired or dropped) and
  // cancels its prefetches.
  void ReleaseSession(Session& session);
  // Releases what a session handed back.
  void Release(const LookupRelease& release);
  // Releases what the lookups `connection` made still hold (it closed).
  void ReleaseConnectionLookups(std::string_view connection);

 private:
  SessionManager* const sessions_;
  store::ObjectTable* const table_;
  tier::Prefetcher* const prefetcher_;
};

}  // namespace lmcache::worker
