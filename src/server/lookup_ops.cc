#include "server/lookup_ops.h"

#include <algorithm>
#include <chrono>
#include <optional>

namespace lmcache::server {
namespace {

// Keys expanded at a time (chunks x ranks): bounds a lookup's transient
// memory whatever its world size and prompt length.
constexpr std::size_t kWindowKeys = 4096;

// Adds what a finished prefetch loaded to the lookup's hit prefix.
void FoldPrefetch(worker::LookupState& lookup, const std::optional<tier::PrefetchResult>& landed) {
  if (!landed) return;
  lookup.prefetch_pending = false;
  lookup.hit_chunks += landed->chunks;
  if (landed->lease != store::kNoLease) lookup.leases.push_back(landed->lease);
}

}  // namespace

Result<LookupOps::KeyArgs> LookupOps::DecodeKey(Payloads p) const {
  // p[1] (tp_size) is kept for arity; num_kv_readers decides the lock count.
  LMC_ASSIGN_OR_RETURN(IpcKey key, protocol::DecodeIpcKey(p[0], deps_.config.key_limits));
  return KeyArgs{std::move(key)};
}

namespace {

Result<LookupOps::StatusArgs> DecodeStatus(Payloads p) {
  LookupOps::StatusArgs args;
  LMC_ASSIGN_OR_RETURN(args.request_id, protocol::DecodeString(p[0], "request_id"));
  if (p.size() > 1) {
    LMC_ASSIGN_OR_RETURN(args.timeout_seconds, protocol::DecodeFloat(p[1], "timeout"));
  }
  return args;
}

Result<std::string> DecodeRequestId(Payloads p) {
  // p[1] (end_info, newest clients) carries nothing this server uses.
  return protocol::DecodeString(p[0], "request_id");
}

}  // namespace

void LookupOps::AddTo(OpTable* table) {
  using F = FailureValue;
  using P = Pool;
  auto key = [this](Payloads p) { return DecodeKey(p); };
  auto status = [this](StatusQuery query) {
    return [this, query](const RequestContext&, const StatusArgs& args) {
      return QueryStatus(args, query);
    };
  };
  // A lookup's key decode is its first stage (lookup_stage_duration_seconds).
  auto timed_key = [this](Payloads p) {
    const auto start = std::chrono::steady_clock::now();
    auto decoded = DecodeKey(p);
    deps_.counters.lookup_decode_latency.RecordSince(start);
    return decoded;
  };
  table->Add({Op::kLookup, "lookup", true, P::kCpu, 1, 2, kKeyRequestBytes, F::kNil},
             Bind(timed_key,
                  [this](const RequestContext& c, const KeyArgs& a) { return Lookup(c, a.key); }));
  table->Add({Op::kQueryPrefetchStatus, "query_prefetch_status", true, P::kCpu, 1, 1, 8192,
              F::kZero},
             Bind(DecodeStatus, status(StatusQuery::kStatus)));
  deps_.parked.Declare("wait_prefetch_status");
  table->Add({Op::kWaitPrefetchStatus, "wait_prefetch_status", true, P::kCpu, 1, 2, 8192,
              F::kZero},
             [this](const RequestContext& context, Payloads payloads, const Respond& respond) {
               auto args = DecodeStatus(payloads);
               if (!args.ok()) return respond(args.status());
               WaitStatus(context, *args, respond);
             });
  table->Add({Op::kQueryPrefetchLookupHits, "query_prefetch_lookup_hits", true, P::kCpu, 1, 1,
              8192, F::kZero},
             Bind(DecodeStatus, status(StatusQuery::kHits)));
  table->Add({Op::kFreeLookupLocks, "free_lookup_locks", true, P::kCpu, 1, 2, kKeyRequestBytes,
              F::kNil},
             Bind(key, [this](const RequestContext&, const KeyArgs& a) {
               return FreeLookupLocks(a.key);
             }));
  table->Add({Op::kEndSession, "end_session", true, P::kCpu, 1, 2, 64u << 10, F::kNil},
             Bind(DecodeRequestId, [this](const RequestContext&, const std::string& request_id) {
               return EndSession(request_id);
             }));
}

void LookupOps::ForEachKeyWindow(
    const worker::LookupState& lookup, std::size_t first, std::size_t last,
    const std::function<void(std::span<const store::ObjectKey>)>& fn) const {
  last = std::min(last, lookup.hashes.size());
  const std::vector<std::int64_t> ranks = worker::AllRanks(lookup.world_size);
  const std::size_t window = std::max<std::size_t>(1, kWindowKeys / ranks.size());
  for (std::size_t c = first; c < last; c += window) {
    const std::size_t n = std::min(window, last - c);
    const std::vector<store::ObjectKey> keys =
        worker::ExpandKeys(std::span(lookup.hashes).subspan(c, n), lookup.model_name, lookup.cache_salt,
                   lookup.tags, ranks, lookup.layout_namespace);
    fn(keys);
  }
}

Status LookupOps::LockPrefix(const store::Owner& owner, std::size_t first, std::size_t chunks,
                             worker::LookupState* lookup) {
  const std::vector<std::int64_t> ranks = worker::AllRanks(lookup->world_size);
  const std::size_t window = std::max<std::size_t>(1, kWindowKeys / ranks.size());
  store::LeaseId lease = store::kNoLease;
  for (std::size_t c = first; c < chunks; c += window) {
    const std::size_t n = std::min(window, chunks - c);
    const std::vector<store::ObjectKey> keys =
        worker::ExpandKeys(std::span(lookup->hashes).subspan(c, n), lookup->model_name, lookup->cache_salt,
                   lookup->tags, ranks, lookup->layout_namespace);
    store::ReadRequest request;
    request.keys = keys;
    request.owner = owner;
    request.count = lookup->readers;
    request.mode = store::ReadMode::kPrefix;
    request.group = ranks.size();  // a chunk counts only when every rank has it
    request.extend = lease;
    LMC_ASSIGN_OR_RETURN(const store::ReadAcquisition acquired,
                         deps_.table.AcquireRead(request));
    if (acquired.lease != store::kNoLease) lease = acquired.lease;
    lookup->hit_chunks += acquired.granted / ranks.size();
    if (acquired.granted < keys.size()) break;
  }
  if (lease != store::kNoLease) lookup->leases.push_back(lease);
  return Status::Ok();
}

double LookupOps::RecomputeSecondsPerChunk(const std::string& model) const {
  const std::map<std::string, double>& rates = deps_.config.prefill_tokens_per_second;
  auto it = rates.find(model);
  if (it == rates.end()) it = rates.find("*");
  if (it == rates.end()) return 0;  // no rate: always load
  return static_cast<double>(deps_.config.chunk_sizes.For(model)) / it->second;
}

std::size_t LookupOps::ResidentPrefix(const worker::LookupState& lookup, std::size_t chunks) const {
  const std::size_t ranks = worker::AllRanks(lookup.world_size).size();
  std::size_t resident = 0;
  bool ended = false;
  ForEachKeyWindow(lookup, 0, chunks, [&](std::span<const store::ObjectKey> keys) {
    for (std::size_t i = 0; i < keys.size() && !ended; ++i) {
      const std::optional<store::ObjectInfo> info = deps_.table.Find(keys[i]);
      ended = !info || info->state != store::ObjectState::kResident;
      if (!ended && (i + 1) % ranks == 0) resident += 1;  // every rank of the chunk
    }
  });
  return resident;
}

Result<std::string> LookupOps::Lookup(const RequestContext& context, const IpcKey& key) {
  if (key.num_kv_readers < 1 || key.num_kv_readers > store::kMaxReadLockCount) {
    return InvalidArgument("key.num_kv_readers must be in [1, 128], got " +
                           std::to_string(key.num_kv_readers) +
                           " (0 means an old client that does not send it)");
  }
  if (key.world_size < 1 || key.world_size > 255) {
    return InvalidArgument("key.world_size must be in [1, 255]");
  }
  LMC_RETURN_IF_ERROR(
      deps_.config.chunk_sizes.CheckServedAt(context.endpoint_model, key.model_name));
  const std::int64_t chunk_size = deps_.config.chunk_sizes.For(key.model_name);
  LMC_RETURN_IF_ERROR(worker::CheckKeyRange(key, chunk_size));
  const auto chunk = static_cast<std::size_t>(chunk_size);
  const std::size_t chunks = key.token_ids.size() / chunk;  // the whole prompt (spec 9.2)
  const std::size_t held_chunks =
      std::min(chunks, static_cast<std::size_t>(key.engine_computed_tokens.value_or(0)) / chunk);
  std::shared_ptr<worker::Session> session = deps_.sessions.GetOrCreate(key.request_id);
  worker::LookupRelease release;
  std::size_t hit_chunks = 0;
  {
    MutexLock lock(&session->mu);
    const std::string tenant = worker::TenantOf(key);
    LMC_ASSIGN_OR_RETURN(release, session->BeginLookup(
                                      tenant, deps_.sessions.limits().max_tenants_per_session));
    worker::LookupState& lookup = *session->FindLookup(tenant);
    lookup.connection = std::string(context.connection);
    lookup.cache_salt = key.cache_salt;
    lookup.tags = store::CanonicalTags(key.tags);
    lookup.model_name = key.model_name;
    lookup.world_size = key.world_size;
    lookup.readers = static_cast<std::uint32_t>(key.num_kv_readers);
    // No instance registered this (model, world size): nothing can be cached
    // (spec 9.2). A request that asked to skip loading is a miss, nothing
    // locked or loaded (the reference's DEFAULT kv_load_policy).
    std::optional<worker::ChunkLayout> layout;
    if (!key.skip_load) layout = deps_.instances.LayoutOf(key.model_name, key.world_size);
    if (layout) {
      lookup.layout_namespace = layout->object_namespace;
      const auto hashing = std::chrono::steady_clock::now();
      lookup.hashes = deps_.hasher.Hashes(key.token_ids, chunk, chunks);
      const auto locking = std::chrono::steady_clock::now();
      deps_.counters.lookup_hash_latency.RecordSince(hashing, locking);
      // The chunks the engine holds whole are hits where resident, and are
      // not locked: no worker retrieves them.
      if (held_chunks > 0) lookup.hit_chunks = ResidentPrefix(lookup, held_chunks);
      const Status locked = lookup.hit_chunks < held_chunks
                                ? Status::Ok()
                                : LockPrefix(session->owner(), held_chunks, chunks, &lookup);
      deps_.counters.lookup_lock_latency.RecordSince(locking);
      if (!locked.ok()) {
        session->Account();
        return locked;
      }
      tier::Prefetcher* prefetcher = deps_.prefetcher;
      if (prefetcher != nullptr && lookup.hit_chunks < chunks) {
        // The rest may be in L2: its loads land read-locked for this session.
        const std::vector<std::int64_t> ranks = worker::AllRanks(key.world_size);
        tier::PrefetchRequest request;
        request.keys = worker::ExpandKeys(std::span(lookup.hashes).subspan(lookup.hit_chunks),
                                  key.model_name, key.cache_salt, lookup.tags, ranks,
                                  lookup.layout_namespace);
        request.ranks = ranks.size();
        request.readers = lookup.readers;
        request.owner = session->owner();
        request.object_bytes = layout->object_bytes;
        request.held_chunks = held_chunks - std::min(held_chunks, lookup.hit_chunks);
        request.recompute_seconds_per_chunk = RecomputeSecondsPerChunk(key.model_name);
        if (deps_.token_bindings != nullptr) {
          // What the prefetch loads is admitted to L1 with these tokens: the
          // KV events announce it (a load names only hashes).
          deps_.token_bindings->Bind(key.model_name, lookup.hashes, lookup.hit_chunks,
                                     key.token_ids, chunk);
        }
        lookup.prefetch_handle = prefetcher->Submit(std::move(request));
        lookup.prefetch_pending = true;
      }
    }
    hit_chunks = lookup.hit_chunks;
    session->Account();
  }
  deps_.sessions.NoteConnection(key.request_id, context.connection);
  deps_.leases.Release(release);
  deps_.sessions.Trim();
  ServiceCounters& counters = deps_.counters;
  counters.lookups.fetch_add(1, std::memory_order_relaxed);
  counters.lookup_requested_tokens.fetch_add(chunks * chunk, std::memory_order_relaxed);
  counters.lookup_hit_tokens.fetch_add(hit_chunks * chunk, std::memory_order_relaxed);
  if (key.skip_load) counters.lookups_skip_load.fetch_add(1, std::memory_order_relaxed);
  if (key.engine_computed_tokens) {
    counters.lookups_engine_hinted.fetch_add(1, std::memory_order_relaxed);
    counters.lookup_engine_held_tokens.fetch_add(held_chunks * chunk, std::memory_order_relaxed);
  }
  return msgpk::Encoder().Nil().Take();
}

Result<std::string> LookupOps::QueryStatus(const StatusArgs& args, StatusQuery query) {
  std::shared_ptr<worker::Session> session = deps_.sessions.Find(args.request_id);
  if (!session) return msgpk::Encoder().Int(0).Take();  // unknown request: 0, as the reference
  tier::Prefetcher* prefetcher = deps_.prefetcher;
  MutexLock lock(&session->mu);
  worker::LookupState* lookup = session->StatusLookup();
  if (lookup == nullptr) return msgpk::Encoder().Int(0).Take();
  if (lookup->prefetch_pending && query == StatusQuery::kHits) {
    // L1 + L2 prefix once the L2 lookups are done, before the loads land (spec 9.4).
    const std::optional<std::size_t> l2 = prefetcher->LookupHits(lookup->prefetch_handle);
    if (!l2) return msgpk::Encoder().Nil().Take();
    return msgpk::Encoder().Uint(lookup->hit_chunks + *l2).Take();
  }
  if (lookup->prefetch_pending) FoldPrefetch(*lookup, prefetcher->Poll(lookup->prefetch_handle));
  return ReportStatusLocked(*session, query);
}

std::string LookupOps::ReportStatusLocked(worker::Session& session, StatusQuery query) {
  worker::LookupState* lookup = session.StatusLookup();
  if (lookup == nullptr || lookup->status_consumed) return msgpk::Encoder().Int(0).Take();
  if (lookup->prefetch_pending && query != StatusQuery::kHits) {
    return msgpk::Encoder().Nil().Take();  // still loading
  }
  // The status is reported once (a second query answers 0, as the reference);
  // the lookup hits may be asked for any number of times.
  if (query != StatusQuery::kHits) lookup->status_consumed = true;
  return msgpk::Encoder().Uint(lookup->hit_chunks).Take();
}

void LookupOps::WaitStatus(const RequestContext& context, const StatusArgs& args,
                           Respond respond) {
  std::shared_ptr<worker::Session> session = deps_.sessions.Find(args.request_id);
  if (!session) return respond(msgpk::Encoder().Int(0).Take());  // unknown request
  tier::Prefetcher* prefetcher = deps_.prefetcher;
  // The prefetch this wait is for: its lookup is named by salt and sequence,
  // so that a newer lookup of the request is never mistaken for it.
  tier::PrefetchHandle handle = 0;
  std::string salt;
  std::uint64_t sequence = 0;
  std::optional<std::string> known;  // the answer, when there is one now
  {
    MutexLock lock(&session->mu);
    worker::LookupState* lookup = session->StatusLookup();
    if (lookup != nullptr && lookup->prefetch_pending) {
      FoldPrefetch(*lookup, prefetcher->Poll(lookup->prefetch_handle));
    }
    if (lookup == nullptr || !lookup->prefetch_pending) {
      known = ReportStatusLocked(*session, StatusQuery::kWait);
    } else {
      handle = lookup->prefetch_handle;
      salt = lookup->tenant;
      sequence = lookup->sequence;
    }
  }
  // Answers go out with no lock held: on the transport's thread an answer
  // can end the connection's last request, and its release takes locks.
  if (known) return respond(std::move(*known));
  const auto timeout_ms =
      static_cast<TimeMs>(std::clamp(args.timeout_seconds, 0.0, 3600.0) * 1000);
  if (timeout_ms == 0) return respond(msgpk::Encoder().Nil().Take());  // still loading
  auto finish = [this, session, handle, salt, sequence, respond](ParkEnd) {
    std::string answer;
    {
      MutexLock lock(&session->mu);
      worker::LookupState* lookup = session->FindLookup(salt);
      if (lookup != nullptr && lookup->sequence == sequence && lookup->prefetch_pending) {
        FoldPrefetch(*lookup, deps_.prefetcher->Poll(handle));
      }
      // A lookup that still loads answers nil (its deadline passed, or the
      // client or the server is going); one whose session ended answers 0.
      answer = ReportStatusLocked(*session, StatusQuery::kWait);
    }
    respond(std::move(answer));
  };
  auto waker = deps_.parked.Park("wait_prefetch_status", context.connection,
                                 deps_.clock.NowMs() + timeout_ms, std::move(finish));
  if (!waker.ok()) return respond(waker.status());
  prefetcher->NotifyWhenLanded(handle, std::move(waker).value());
}

Result<std::string> LookupOps::FreeLookupLocks(const IpcKey& key) {
  if (key.start < 0 || key.end <= key.start) return msgpk::Encoder().Nil().Take();
  std::shared_ptr<worker::Session> session = deps_.sessions.Find(key.request_id);
  if (!session) return msgpk::Encoder().Nil().Take();
  MutexLock lock(&session->mu);
  const worker::LookupState* lookup = session->FindLookup(worker::TenantOf(key));
  if (lookup == nullptr) return msgpk::Encoder().Nil().Take();
  // The lookup's own model's chunks, whatever model this key names.
  const auto chunk = static_cast<std::size_t>(deps_.config.chunk_sizes.For(lookup->model_name));
  // A chunk partly reused by the engine stays locked until retrieve or TTL
  // (spec 9.6). Whatever the lookup's leases still hold in the range goes:
  // releasing twice finds nothing the second time.
  const std::size_t first = static_cast<std::size_t>(key.start) / chunk;
  const std::size_t last = std::min(static_cast<std::size_t>(key.end) / chunk, lookup->hit_chunks);
  ForEachKeyWindow(*lookup, first, last, [&](std::span<const store::ObjectKey> keys) {
    for (const store::LeaseId lease : lookup->leases) deps_.table.ReleaseRead(lease, keys);
  });
  return msgpk::Encoder().Nil().Take();
}

Result<std::string> LookupOps::EndSession(const std::string& request_id) {
  std::shared_ptr<worker::Session> session = deps_.sessions.Find(request_id);
  if (!session) return msgpk::Encoder().Nil().Take();
  {
    MutexLock lock(&session->mu);
    // The main recency signal for LRU (spec 9.7): every chunk of the prompt.
    for (const worker::LookupState* lookup : session->Lookups()) {
      ForEachKeyWindow(*lookup, 0, lookup->hashes.size(),
                       [&](std::span<const store::ObjectKey> keys) { deps_.table.Touch(keys); });
    }
  }
  // Every lock the session still holds goes with it (leases no retrieve consumed).
  deps_.sessions.Remove(request_id);
  return msgpk::Encoder().Nil().Take();
}

}  // namespace lmcache::server
