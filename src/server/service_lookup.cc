// Service: lookup, prefetch status, free_lookup_locks and end_session (spec 9).
//
// Lock accounting (spec 9.8): a lookup takes `num_kv_readers` read locks on
// every object of the hit prefix (all ranks); each reader's commit_retrieve
// releases one; free_lookup_locks releases the unused range, at most once per
// chunk; anything left expires with the read lease.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "server/codec.h"
#include "server/service.h"
#include "server/service_internal.h"

namespace lmcache::server {
namespace {

// Keys of chunks [first, last) of the session's last lookup, all ranks. The
// lookup's own hashes are used, so a later request of the same session with
// other tokens cannot redirect a release to other objects.
std::vector<store::ObjectKey> LookupKeys(const LookupState& lookup, std::size_t first,
                                         std::size_t last) {
  last = std::min(last, lookup.hashes.size());
  if (first >= last) return {};
  const std::vector<store::ChunkHash> hashes(
      lookup.hashes.begin() + static_cast<std::ptrdiff_t>(first),
      lookup.hashes.begin() + static_cast<std::ptrdiff_t>(last));
  return ExpandKeys(hashes, lookup.model_name, lookup.cache_salt, AllRanks(lookup.world_size));
}

}  // namespace

Result<std::string> Service::Lookup(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const IpcKey key, DecodeIpcKey(p[0]));
  // p[1] (tp_size) is kept for arity; num_kv_readers decides the lock count.
  if (key.num_kv_readers < 1 || key.num_kv_readers > store::kMaxReadLockCount) {
    return InvalidArgument("key.num_kv_readers must be in [1, 128], got " +
                           std::to_string(key.num_kv_readers) +
                           " (0 means an old client that does not send it)");
  }
  if (key.world_size < 1 || key.world_size > 255) {
    return InvalidArgument("key.world_size must be in [1, 255]");
  }
  LMC_RETURN_IF_ERROR(CheckKeyRange(key));
  std::shared_ptr<Session> session = sessions_.GetOrCreate(key.request_id);
  if (!session) return Status(ErrorCode::kResourceExhausted, "too many live sessions");
  const auto chunk = static_cast<std::size_t>(config_.chunk_size);
  const store::OwnerId owner = SessionOwner(key.request_id);

  MutexLock lock(&session->mu);
  LookupState& lookup = session->lookup();
  if (lookup.active && !lookup.status_consumed && lookup.hit_chunks > 0) {
    // The scheduler never saw the previous result, so no worker will retrieve
    // it: give its locks back instead of leaving them to the TTL.
    std::vector<store::ObjectKey> unreleased;
    for (std::size_t c = 0; c < lookup.hit_chunks; ++c) {
      if (lookup.lookup_released[c]) continue;
      const auto keys = LookupKeys(lookup, c, c + 1);
      unreleased.insert(unreleased.end(), keys.begin(), keys.end());
    }
    (void)table().FinishRead(unreleased, lookup.readers, owner);
  }
  lookup = LookupState{};
  lookup.active = true;
  lookup.model_name = key.model_name;
  lookup.world_size = key.world_size;
  lookup.cache_salt = key.cache_salt;
  lookup.readers = static_cast<std::uint32_t>(key.num_kv_readers);

  // No instance registered this (model, world size): nothing can be cached (spec 9.2).
  if (!instances_.LayoutOf(key.model_name, key.world_size)) return Encoder().Nil().Take();

  const std::size_t chunks = key.token_ids.size() / chunk;  // the whole prompt (spec 9.2)
  const auto ranks = AllRanks(key.world_size);
  lookup.hashes = session->Hashes(key.token_ids, chunk, 0, chunks);
  const auto keys = ExpandKeys(lookup.hashes, key.model_name, key.cache_salt, ranks);
  LMC_ASSIGN_OR_RETURN(const std::vector<store::ReadGrant> grants,
                       table().ReserveRead(keys, lookup.readers, owner, store::ReadMode::kPrefix));
  std::size_t found = 0;
  while (found < grants.size() && grants[found].granted) ++found;
  lookup.hit_chunks = found / ranks.size();
  // A chunk counts only when every rank has it; release the ranks of a
  // partially found chunk at once (the reference leaves them to the TTL).
  const std::size_t locked_keys = lookup.hit_chunks * ranks.size();
  if (found > locked_keys) {
    const std::vector<store::ObjectKey> partial(
        keys.begin() + static_cast<std::ptrdiff_t>(locked_keys),
        keys.begin() + static_cast<std::ptrdiff_t>(found));
    (void)table().FinishRead(partial, lookup.readers, owner);
  }
  lookup.lookup_released.assign(lookup.hit_chunks, false);
  if (prefetcher_ != nullptr && lookup.hit_chunks < chunks) {
    // The rest may be in L2: its loads land read-locked for this session.
    tier::PrefetchRequest request;
    request.keys = std::vector<store::ObjectKey>(
        keys.begin() + static_cast<std::ptrdiff_t>(locked_keys), keys.end());
    request.ranks = ranks.size();
    request.readers = lookup.readers;
    request.owner = owner;
    lookup.prefetch_handle = prefetcher_->Submit(std::move(request));
    lookup.prefetch_pending = true;
  }
  return Encoder().Nil().Take();
}

namespace {

// Adds the chunks a finished prefetch loaded to the lookup's hit prefix.
void FoldPrefetch(LookupState& lookup, std::optional<std::size_t> landed) {
  if (!landed) return;
  lookup.prefetch_pending = false;
  lookup.hit_chunks += *landed;
  lookup.lookup_released.resize(lookup.hit_chunks, false);
}

}  // namespace

Result<std::string> Service::QueryPrefetchStatus(Payloads p, StatusQuery query) {
  LMC_ASSIGN_OR_RETURN(const std::string request_id, DecodeString(p[0], "request_id"));
  double timeout_seconds = 0;
  if (p.size() > 1) {
    LMC_ASSIGN_OR_RETURN(timeout_seconds, DecodeFloat(p[1], "timeout"));
  }
  std::shared_ptr<Session> session = sessions_.Find(request_id);
  if (!session) return Encoder().Int(0).Take();  // unknown request: 0, as the reference
  std::optional<tier::PrefetchHandle> waiting;
  {
    MutexLock lock(&session->mu);
    LookupState& lookup = session->lookup();
    if (lookup.prefetch_pending) {
      if (query != StatusQuery::kWait) {
        FoldPrefetch(lookup, prefetcher_->Poll(lookup.prefetch_handle));
        if (lookup.prefetch_pending) return Encoder().Nil().Take();  // still loading
      } else {
        waiting = lookup.prefetch_handle;
      }
    }
  }
  if (waiting) {
    // Wait without the session's mutex: other calls of this request go on.
    const auto timeout = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::clamp(timeout_seconds, 0.0, 3600.0) * 1000));
    const std::optional<std::size_t> landed = prefetcher_->Wait(*waiting, timeout);
    MutexLock lock(&session->mu);
    LookupState& lookup = session->lookup();
    if (lookup.prefetch_pending && lookup.prefetch_handle == *waiting) FoldPrefetch(lookup, landed);
    if (lookup.prefetch_pending) return Encoder().Nil().Take();  // timed out
  }
  MutexLock lock(&session->mu);
  LookupState& lookup = session->lookup();
  if (!lookup.active || lookup.status_consumed) return Encoder().Int(0).Take();
  // The status is reported once (a second query answers 0, as the reference);
  // the lookup hits may be asked for any number of times.
  if (query != StatusQuery::kHits) lookup.status_consumed = true;
  return Encoder().Uint(lookup.hit_chunks).Take();
}

Result<std::string> Service::FreeLookupLocks(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const IpcKey key, DecodeIpcKey(p[0]));
  if (key.start < 0 || key.end <= key.start) return Encoder().Nil().Take();
  std::shared_ptr<Session> session = sessions_.Find(key.request_id);
  if (!session) return Encoder().Nil().Take();
  const auto chunk = static_cast<std::size_t>(config_.chunk_size);
  MutexLock lock(&session->mu);
  LookupState& lookup = session->lookup();
  if (!lookup.active) return Encoder().Nil().Take();
  // A chunk partly reused by the engine stays locked until retrieve or TTL (spec 9.6).
  const std::size_t first = static_cast<std::size_t>(key.start) / chunk;
  const std::size_t last = std::min(static_cast<std::size_t>(key.end) / chunk, lookup.hit_chunks);
  std::vector<store::ObjectKey> release;
  for (std::size_t c = first; c < last; ++c) {
    if (lookup.lookup_released[c]) continue;  // idempotent: never release a chunk twice
    lookup.lookup_released[c] = true;
    const auto keys = LookupKeys(lookup, c, c + 1);
    release.insert(release.end(), keys.begin(), keys.end());
  }
  if (!release.empty()) {
    LMC_RETURN_IF_ERROR(
        table().FinishRead(release, lookup.readers, SessionOwner(key.request_id)).status());
  }
  return Encoder().Nil().Take();
}

Result<std::string> Service::EndSession(Payloads p) {
  LMC_ASSIGN_OR_RETURN(const std::string request_id, DecodeString(p[0], "request_id"));
  std::shared_ptr<Session> session = sessions_.Remove(request_id);
  if (!session) return Encoder().Nil().Take();
  MutexLock lock(&session->mu);
  const LookupState& lookup = session->lookup();
  if (lookup.active) {
    // The main recency signal for LRU (spec 9.7): every chunk of the prompt.
    table().Touch(LookupKeys(lookup, 0, lookup.hashes.size()));
  }
  return Encoder().Nil().Take();
}

}  // namespace lmcache::server
