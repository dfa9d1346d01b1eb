#include "worker/lookup_leases.h"

#include "worker/key_rules.h"

namespace lmcache::worker {

LookupLeases::LookupLeases(SessionManager* sessions, store::ObjectTable* table,
                           tier::Prefetcher* prefetcher)
    : sessions_(sessions), table_(table), prefetcher_(prefetcher) {}

Result<store::ReadAcquisition> LookupLeases::AcquireForRetrieve(const IpcKey& key,
                                                                std::span<const store::ObjectKey> keys,
                                                                store::Owner owner) {
  store::ReadRequest request;
  request.keys = keys;
  request.owner = owner;
  request.mode = store::ReadMode::kAllOrNothing;
  request.release_share_on_miss = true;
  Result<store::ReadAcquisition> acquired = Status(ErrorCode::kInternal, "not acquired");
  // This reader's share of the request's lookup locks becomes its own lease
  // (under the session's mutex, so free_lookup_locks and end_session of the
  // same request wait); where the lookup's lease expired or never was, the
  // objects still resident are locked afresh.
  if (std::shared_ptr<Session> session = sessions_->Find(key.request_id)) {
    MutexLock lock(&session->mu);
    const std::vector<store::LeaseId> consumable = session->ConsumableLeases(TenantOf(key));
    request.consume = consumable;
    acquired = table_->AcquireRead(request);
  } else {
    acquired = table_->AcquireRead(request);
  }
  LMC_RETURN_IF_ERROR(acquired.status());
  if (acquired->missing > 0) {
    return Status(ErrorCode::kNotFound, std::to_string(acquired->missing) + " of " +
                                            std::to_string(keys.size()) +
                                            " chunks are not in L1 (evicted, never stored, or "
                                            "not looked up)");
  }
  return acquired;
}

void LookupLeases::ReleaseSession(Session& session) {
  LookupRelease release;
  {
    MutexLock lock(&session.mu);
    release = session.TakeAll();
  }
  Release(release);
}

void LookupLeases::ReleaseConnectionLookups(std::string_view connection) {
  // A step at a time: a burst client may have a million sessions.
  for (auto step = sessions_->TakeConnection(connection); !step.empty();
       step = sessions_->TakeConnection(connection)) {
    for (const std::shared_ptr<Session>& session : step) {
      LookupRelease release;
      {
        MutexLock lock(&session->mu);
        release = session->TakeConnection(connection);
      }
      Release(release);
    }
  }
}

void LookupLeases::Release(const LookupRelease& release) {
  for (const tier::PrefetchHandle handle : release.prefetches) {
    if (prefetcher_ != nullptr) prefetcher_->Cancel(handle);
  }
  for (const store::LeaseId lease : release.leases) table_->ReleaseRead(lease);
}

}  // namespace lmcache::worker
