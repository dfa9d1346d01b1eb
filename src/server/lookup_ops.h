// LookupOps: lookup, query_prefetch_status, wait_prefetch_status,
// query_prefetch_lookup_hits, free_lookup_locks and end_session (spec 9).
//
// A lookup hashes the whole prompt and read-locks the leading run of chunks
// present on every rank, `num_kv_readers` locks per object, under one lease
// of the request's session; the rest may be prefetched from L2 (tier::
// Prefetcher) and lands locked under a lease of the same session. The
// reference's request controls (its kv_load_policy design): a lookup with
// lmcache.skip_load answers a miss with nothing locked or loaded; the whole
// chunks of lmcache.hint.engine_computed_tokens count as hits where cached
// but are neither locked nor loaded (no worker retrieves what its engine
// holds). Each
// worker's prepare_retrieve consumes one lock per object into a lease of its
// own (transfer_ops); free_lookup_locks releases what the lookup's leases
// still hold in a range, end_session everything the session holds (lock
// balance: docs/threading.md, "Lease rules"). Keys are expanded window by
// window, so a prompt of any world size costs bounded memory.
//
// wait_prefetch_status never holds a pool thread: a wait on a prefetch still
// loading is parked (parked_requests.h) and answered when it lands, at its
// timeout (nil, as the reference), when its client disconnects or its
// session ends (0: the request is unknown by then), or when the server
// drains (nil).
//
// Thread-safety: the handlers may run on any threads at once; a request's
// calls serialise on its session's mutex.
#pragma once

#include "events/token_bindings.h"
#include "worker/chunk_hasher.h"
#include "worker/instances.h"
#include "worker/lookup_leases.h"
#include "server/op_table.h"
#include "server/parked_requests.h"
#include "server/service_config.h"
#include "worker/key_rules.h"
#include "worker/session.h"
#include "tier/prefetcher.h"

namespace lmcache::server {

class LookupOps {
 public:
  // What the family uses of the service, and nothing else.
  struct Deps {
    const ServiceConfig& config;
    const Clock& clock;
    store::ObjectTable& table;
    worker::SessionManager& sessions;
    worker::LookupLeases& leases;
    ParkedRequests& parked;  // wait_prefetch_status
    worker::InstanceRegistry& instances;  // the layout a lookup's keys are in
    worker::ChunkHasher& hasher;
    ServiceCounters& counters;
    tier::Prefetcher* prefetcher;  // null without an L2 tier
    events::TokenBindings* token_bindings;  // null without KV events
  };
  explicit LookupOps(const Deps& deps) : deps_(deps) {}
  void AddTo(OpTable* table);

  // The payloads of query/wait_prefetch_status and query_prefetch_lookup_hits.
  struct StatusArgs {
    std::string request_id;
    double timeout_seconds = 0;
  };

 private:
  enum class StatusQuery { kStatus, kWait, kHits };
  struct KeyArgs {
    IpcKey key;
  };
  Result<KeyArgs> DecodeKey(Payloads p) const;

  Result<std::string> Lookup(const RequestContext& context, const IpcKey& key);
  Result<std::string> QueryStatus(const StatusArgs& args, StatusQuery query);
  // wait_prefetch_status: answers at once when the lookup's result is known,
  // else parks the request (never its thread) until the prefetch lands, the
  // timeout passes, the client goes or the server drains.
  void WaitStatus(const RequestContext& context, const StatusArgs& args, Respond respond);
  // The lookup the status reports (its prefix, consumed once; nil while it
  // still loads, 0 when there is none).
  std::string ReportStatusLocked(worker::Session& session, StatusQuery query) LMC_REQUIRES(session.mu);
  Result<std::string> FreeLookupLocks(const IpcKey& key);
  Result<std::string> EndSession(const std::string& request_id);
  // Locks the hit prefix of `lookup` among chunks [first, chunks) for
  // `owner`, window by window, adding it to the lookup's hits.
  Status LockPrefix(const store::Owner& owner, std::size_t first, std::size_t chunks,
                    worker::LookupState* lookup);
  // The leading chunks among the first `chunks` of `lookup` resident in L1
  // on every rank, found without a lock (the chunks the engine holds).
  std::size_t ResidentPrefix(const worker::LookupState& lookup, std::size_t chunks) const;
  // Seconds `model`'s engine takes to recompute one chunk
  // (--prefill-tokens-per-second); 0 without a rate (the prefetch loads all).
  double RecomputeSecondsPerChunk(const std::string& model) const;
  // Calls `touch` on the lookup's keys of chunks [first, last), window by window.
  void ForEachKeyWindow(const worker::LookupState& lookup, std::size_t first, std::size_t last,
                        const std::function<void(std::span<const store::ObjectKey>)>& fn) const;

  const Deps deps_;
};

}  // namespace lmcache::server
