// The stats schema's fields of the requests, transport, instances, parked requests, lookups and GPU contexts.
#include "server/stats_schema_tables.h"

namespace lmcache::server::stats_tables {
namespace {

const Entry<OperationRow> kOperationRows[] = {
    {{"requests", K::kCounter, "requests", "requests_total",
      "Requests run, by operation (operations called at least once)."},
     [](const OperationRow& o) { return U(o.requests); }},
    {{"errors", K::kCounter, "requests", "request_errors_total", "Requests that failed, by operation."},
     [](const OperationRow& o) { return U(o.errors); }},
    {{"latency", K::kHistogram, "µs (seconds in Prometheus)", "request_duration_seconds",
      "Time to run a request, by operation (buckets 50 us to 10 s).", {}, kBoth,
      HistogramForm::kFlat},
     [](const OperationRow& o) { return H(o.latency); }},
};

const Entry<S> kTransportErrorsRows[] = {
    {{"transport_errors", K::kCounter, "requests", "transport_errors_total",
      "Requests answered before dispatch (bad frames, unknown operation)."},
     [](const S& s) { return U(s.refused_requests); }},
};

const Entry<S> kRouterRows[] = {
    {{"received", K::kCounter, "requests", "requests_received_total",
      "Requests the transport received."},
     [](const S& s) { return U(s.transport.received); }},
    {{"replied", K::kCounter, "replies", "replies_total", "Replies the transport sent."},
     [](const S& s) { return U(s.transport.replied); }},
    {{"undeliverable", K::kCounter, "replies", "replies_undeliverable_total",
      "Replies whose client had gone."},
     [](const S& s) { return U(s.transport.undeliverable); }},
    {{"refused", K::kCounter, "requests", "requests_refused_total",
      "Requests answered with an error before running (bad frames, unknown operation, overload)."},
     [](const S& s) { return U(s.transport.refused); }},
    {{"stream_items", K::kCounter, "replies", "stream_items_total",
      "Items of streaming operations sent (each batch of a subscribe_kv_events stream)."},
     [](const S& s) { return U(s.transport.stream_items); }},
    {{"stream_controls", K::kCounter, "frames", "stream_controls_total",
      "Stream control frames (ack, cancel) received."},
     [](const S& s) { return U(s.transport.stream_controls); }},
    {{"bad_stream_controls", K::kCounter, "requests", "bad_stream_controls_total",
      "Requests with an empty operation frame that were no stream control (ack, cancel): "
      "answered as malformed (101), and counted in refused too."},
     [](const S& s) { return U(s.transport.bad_controls); }},
    {{"overloaded", K::kCounter, "requests", "requests_overloaded_total",
      "Requests refused because a queue was full (402)."},
     [](const S& s) { return U(s.transport.overloaded); }},
    {{"queued_requests", K::kGauge, "requests", "router_queued_requests",
      "Requests waiting in the worker pools."},
     [](const S& s) { return U(s.transport.queued_requests); }},
    {{"queued_bytes", K::kGauge, "bytes", "router_queued_bytes",
      "Bytes of requests waiting in the worker pools."},
     [](const S& s) { return U(s.transport.queued_bytes); }},
    {{"connections", K::kGauge, "connections", "connections", "Client connections open."},
     [](const S& s) { return U(s.transport.connections); }},
    {{"disconnects", K::kCounter, "connections", "disconnects_total",
      "Client connections that closed."},
     [](const S& s) { return U(s.transport.disconnects); }},
};

std::uint64_t Released(const S& s, worker::ReleaseCause cause) {
  return s.released_instances[static_cast<std::size_t>(cause)];
}

const Entry<S> kInstancesRows[] = {
    {{"registered", K::kGauge, "instances", "instances", "Registered worker instances."},
     [](const S& s) { return U(s.instances.instances); }},
    {{"pending_writes", K::kGauge, "calls", "pending_writes",
      "prepare_store calls waiting for their commit."},
     [](const S& s) { return U(s.instances.pending_writes); }},
    {{"pending_reads", K::kGauge, "calls", "pending_reads",
      "prepare_retrieve calls waiting for their commit."},
     [](const S& s) { return U(s.instances.pending_reads); }},
    // The first names, kept for existing dashboards (the same as `released`).
    {{"reaped", K::kCounter, "instances", "instances_reaped_total",
      "Instances unregistered by the reaper (the same as released, cause reaped)."},
     [](const S& s) { return U(Released(s, worker::ReleaseCause::kReaped)); }},
    {{"replaced", K::kCounter, "instances", "instances_replaced_total",
      "Instances registered again from another connection (the same as released, cause "
      "replaced)."},
     [](const S& s) { return U(Released(s, worker::ReleaseCause::kReplaced)); }},
    {{"departed", K::kCounter, "instances", "instances_departed_total",
      "Instances whose connection closed (the same as released, cause disconnected)."},
     [](const S& s) { return U(Released(s, worker::ReleaseCause::kDisconnected)); }},
};

constexpr const char* kReleasedHelp =
    "Registrations ended, by cause (unregistered, disconnected, reaped, replaced; "
    "docs/security.md).";
const Entry<S> kReleasedRows[] = {
    {{"unregistered", K::kCounter, "instances", "instances_released_total", kReleasedHelp,
      {"cause", "unregistered"}},
     [](const S& s) { return U(Released(s, worker::ReleaseCause::kUnregistered)); }},
    {{"disconnected", K::kCounter, "instances", "instances_released_total", "",
      {"cause", "disconnected"}},
     [](const S& s) { return U(Released(s, worker::ReleaseCause::kDisconnected)); }},
    {{"reaped", K::kCounter, "instances", "instances_released_total", "", {"cause", "reaped"}},
     [](const S& s) { return U(Released(s, worker::ReleaseCause::kReaped)); }},
    {{"replaced", K::kCounter, "instances", "instances_released_total", "", {"cause", "replaced"}},
     [](const S& s) { return U(Released(s, worker::ReleaseCause::kReplaced)); }},
};

const Entry<S> kSessionsRows[] = {
    {{"sessions", K::kGauge, "sessions", "sessions", "Request sessions held."},
     [](const S& s) { return U(s.sessions); }},
    {{"session_bytes", K::kGauge, "bytes", "session_bytes", "Memory held by request sessions."},
     [](const S& s) { return U(s.session_bytes); }},
    {{"sessions_dropped_for_memory", K::kCounter, "sessions", "sessions_dropped_total",
      "Sessions dropped for memory."},
     [](const S& s) { return U(s.sessions_dropped_for_memory); }},
};

const Entry<S> kParkedRows[] = {
    {{"requests", K::kGauge, "requests", "parked_requests",
      "Requests waiting without a thread now (deferred replies: a wait_prefetch_status on a "
      "prefetch still loading)."},
     [](const S& s) { return U(s.parked.requests); }},
};

constexpr const char* kParkEndHelp =
    "Parked requests answered, by operation and why (woken: what they waited for came; "
    "deadline: their timeout passed, a deadline miss; closed: their client went; drained: the "
    "server stopped).";
const Entry<ParkedRow> kParkedOperationRows[] = {
    {{"parked", K::kCounter, "requests", "parked_total", "Requests parked to answer later, by operation."},
     [](const ParkedRow& p) { return U(p.parked); }},
    {{"refused", K::kCounter, "requests", "parked_refused_total",
      "Requests answered 402 at once because their client had 64 requests parked (or the server "
      "65,536), by operation."},
     [](const ParkedRow& p) { return U(p.refused); }},
    {{"woken", K::kCounter, "requests", "parked_ended_total", kParkEndHelp, {"end", "woken"}},
     [](const ParkedRow& p) { return U(p.ended[static_cast<std::size_t>(ParkEnd::kWoken)]); }},
    {{"deadline", K::kCounter, "requests", "parked_ended_total", "", {"end", "deadline"}},
     [](const ParkedRow& p) { return U(p.ended[static_cast<std::size_t>(ParkEnd::kDeadline)]); }},
    {{"closed", K::kCounter, "requests", "parked_ended_total", "", {"end", "closed"}},
     [](const ParkedRow& p) { return U(p.ended[static_cast<std::size_t>(ParkEnd::kClosed)]); }},
    {{"drained", K::kCounter, "requests", "parked_ended_total", "", {"end", "drained"}},
     [](const ParkedRow& p) { return U(p.ended[static_cast<std::size_t>(ParkEnd::kDrained)]); }},
};

const Entry<S> kLookupRows[] = {
    {{"lookups", K::kCounter, "lookups", "lookups_total", "Lookups.", {}, kBoth, {}, true},
     [](const S& s) { return U(s.lookups); }},
    {{"requested_tokens", K::kCounter, "tokens", "lookup_requested_total", "Tokens looked up.", {},
      kBoth, {}, true},
     [](const S& s) { return U(s.lookup_requested_tokens); }},
    {{"hit_tokens", K::kCounter, "tokens", "lookup_hit_total",
      "Tokens found cached by lookups (the L1 prefix).", {}, kBoth, {}, true},
     [](const S& s) { return U(s.lookup_hit_tokens); }},
    {{"hash_cache_hits", K::kCounter, "hashes", "hash_cache_hits_total",
      "Chunk hashes answered by the hash cache."},
     [](const S& s) { return U(s.hash_cache.hits); }},
    {{"hash_cache_misses", K::kCounter, "hashes", "hash_cache_misses_total", "Chunk hashes computed."},
     [](const S& s) { return U(s.hash_cache.misses); }},
    {{"hash_cache_entries", K::kGauge, "entries", "hash_cache_entries",
      "Token prefixes the hash cache holds."},
     [](const S& s) { return U(s.hash_cache.entries); }},
    {{"hash_cache_bytes", K::kGauge, "bytes", "hash_cache_bytes", "Memory the hash cache holds."},
     [](const S& s) { return U(s.hash_cache.bytes); }},
};

const Entry<S> kBlockReportsRows[] = {
    {{"block_allocation_reports", K::kCounter, "reports", "block_allocation_reports_total",
      "report_block_allocation calls received (counted, not acted on)."},
     [](const S& s) { return U(s.block_allocation_reports); }},
};

const Entry<S> kGpuRows[] = {
    {{"contexts", K::kGauge, "contexts", "gpu_contexts",
      "GPU registrations with a device context (CUDA-IPC path)."},
     [](const S& s) { return U(s.gpu.contexts); }},
    {{"closing_contexts", K::kGauge, "contexts", "gpu_closing_contexts",
      "Device contexts of departed workers waiting for their copies to drain; stuck above 0 "
      "means an engine event that never completes."},
     [](const S& s) { return U(s.gpu.closing); }},
    {{"transfers_in_flight", K::kGauge, "transfers", "gpu_transfers_in_flight",
      "GPU stores and retrieves queued or copying."},
     [](const S& s) { return U(s.gpu.transfers_in_flight); }},
    {{"mapped_allocations", K::kGauge, "allocations", "gpu_mapped_allocations",
      "Workers' GPU allocations mapped through IPC handles; should fall back after workers leave "
      "(#4980)."},
     [](const S& s) { return U(s.gpu.mapped_allocations); }},
    {{"mapped_bytes", K::kGauge, "bytes", "gpu_mapped_bytes",
      "Bytes of the workers' GPU allocations mapped through IPC handles (their real extent); "
      "should fall back with them."},
     [](const S& s) { return U(s.gpu.mapped_bytes); }},
};

const Entry<S> kKvEventsRows[] = {
    {{"enabled", K::kGauge, "bool", "kv_events_enabled",
      "1 when the KV event channel records (--kv-event-log-size above 0)."},
     [](const S& s) { return B(s.kv_events.log.enabled); }},
    {{"recording", K::kGauge, "bool", "kv_events_recording",
      "1 once the channel records: from the first poll_kv_events, or from startup with "
      "--kv-events-url (until then stores pay nothing for KV events)."},
     [](const S& s) { return B(s.kv_events.log.recording); }},
    {{"incarnation", K::kGauge, "nanoseconds", "kv_events_incarnation",
      "This log's incarnation (wall clock at startup); a reader that sees it change forgets "
      "what it learned."},
     [](const S& s) { return U(s.kv_events.log.incarnation); }},
    {{"log_depth", K::kGauge, "records", "kv_events_log_depth", "Records the KV event log holds.",
      {}, kBoth, {}, true},
     [](const S& s) { return U(s.kv_events.log.depth); }},
    {{"log_bytes", K::kGauge, "bytes", "kv_events_log_bytes", "Memory the KV event log holds."},
     [](const S& s) { return U(s.kv_events.log.bytes); }},
    {{"log_capacity", K::kGauge, "records", "kv_events_log_capacity",
      "Records the log keeps at most (--kv-event-log-size)."},
     [](const S& s) { return U(s.kv_events.log.capacity); }},
    {{"next_seq", K::kGauge, "records", "kv_events_next_seq",
      "Sequence number of the next record (records since startup + 1)."},
     [](const S& s) { return U(s.kv_events.log.next_seq); }},
    {{"recorded", K::kCounter, "records", "kv_events_recorded_total",
      "Records appended to the KV event log."},
     [](const S& s) { return U(s.kv_events.log.appended); }},
    {{"dropped", K::kCounter, "records", "kv_events_dropped_total",
      "Records the log's bounds pushed out; a reader that had not read them is told it lost "
      "records."},
     [](const S& s) { return U(s.kv_events.log.dropped); }},
    {{"unbound_stores", K::kCounter, "chunks", "kv_events_unbound_stores_total",
      "Chunks admitted to L1 without known tokens (loaded from L2 with no lookup naming them, "
      "or their binding was evicted): no stored record."},
     [](const S& s) { return U(s.kv_events.recorder.unbound_stores); }},
    {{"token_binding_bytes", K::kGauge, "bytes", "kv_events_token_binding_bytes",
      "Memory holding the tokens of recently stored chunks (--kv-event-token-cache-mb)."},
     [](const S& s) { return U(s.kv_events.recorder.binding_bytes); }},
    {{"subscribers", K::kGauge, "subscribers", "kv_events_subscribers",
      "Readers woken by new records (the streams' sender and the vLLM-format publisher)."},
     [](const S& s) { return U(s.kv_events.log.watchers); }},
    {{"streams", K::kGauge, "streams", "kv_events_streams",
      "subscribe_kv_events streams open now."},
     [](const S& s) { return U(s.kv_events.streams.open); }},
    {{"streams_opened", K::kCounter, "streams", "kv_events_streams_opened_total",
      "subscribe_kv_events streams opened since startup."},
     [](const S& s) { return U(s.kv_events.streams.opened); }},
    {{"stream_batches", K::kCounter, "batches", "kv_events_stream_batches_total",
      "Batches sent on subscribe_kv_events streams (their status batches included)."},
     [](const S& s) { return U(s.kv_events.streams.batches); }},
    {{"stale_stream_controls", K::kCounter, "frames", "kv_events_stale_stream_controls_total",
      "Acks or cancels for a stream that had already ended."},
     [](const S& s) { return U(s.kv_events.streams.stale_controls); }},
    {{"published_messages", K::kCounter, "messages", "kv_events_published_messages_total",
      "vLLM-format messages sent on --kv-events-url."},
     [](const S& s) { return U(s.kv_events.publisher.messages); }},
    {{"published_events", K::kCounter, "events", "kv_events_published_total",
      "vLLM-format events sent on --kv-events-url."},
     [](const S& s) { return U(s.kv_events.publisher.events); }},
    {{"published_clears_for_loss", K::kCounter, "messages", "kv_events_published_clears_for_loss_total",
      "AllBlocksCleared sent because the log dropped records the publisher had not sent."},
     [](const S& s) { return U(s.kv_events.publisher.clears_for_loss); }},
    {{"replays", K::kCounter, "requests", "kv_events_replays_total",
      "Replay requests answered on --kv-events-replay-url."},
     [](const S& s) { return U(s.kv_events.publisher.replays); }},
};

const Entry<S> kRestartRows[] = {
    {{"took_over", K::kGauge, "bool", "restart_took_over",
      "1 when this server took its pool over from its predecessor (--takeover) instead of "
      "starting cold."},
     [](const S& s) { return B(s.restart.took_over); }},
    {{"adopted_objects", K::kGauge, "objects", "restart_adopted_objects",
      "Objects the predecessor had committed that this server serves again, in place."},
     [](const S& s) { return U(s.restart.adopted_objects); }},
    {{"adopted_bytes", K::kGauge, "bytes", "restart_adopted_bytes",
      "Aligned bytes of the adopted objects (none was copied)."},
     [](const S& s) { return U(s.restart.adopted_bytes); }},
    {{"adopted_read_locked", K::kGauge, "objects", "restart_adopted_read_locked",
      "Adopted objects a reader held at the handover: kept from eviction for a read lease."},
     [](const S& s) { return U(s.restart.adopted_read_locked); }},
    {{"dropped_staged", K::kGauge, "objects", "restart_dropped_staged",
      "Copies staged but not committed at the handover: never served, their memory kept from "
      "reuse for a write lease (a worker may still be writing it)."},
     [](const S& s) { return U(s.restart.dropped_staged); }},
    {{"dropped_staged_bytes", K::kGauge, "bytes", "restart_dropped_staged_bytes",
      "Bytes of the dropped staged copies."},
     [](const S& s) { return U(s.restart.dropped_staged_bytes); }},
    {{"carried_registrations", K::kGauge, "instances", "restart_carried_registrations",
      "Engine-driven worker registrations carried over from the predecessor."},
     [](const S& s) { return U(s.restart.carried_registrations); }},
    {{"takeover_seconds", K::kGauge, "seconds", "restart_takeover_seconds",
      "From asking the predecessor to hand over to serving (its drain included)."},
     [](const S& s) { return F(s.restart.takeover_seconds); }},
    {{"recovered", K::kGauge, "bool", "restart_recovered",
      "1 when this server adopted the pool a crashed predecessor left (--recover-pool)."},
     [](const S& s) { return B(s.restart.recovered); }},
    {{"recovered_objects", K::kGauge, "objects", "restart_recovered_objects",
      "Objects of the crashed predecessor served again: sealed in its journal, their checksum "
      "verified."},
     [](const S& s) { return U(s.restart.recovered_objects); }},
    {{"recovered_bytes", K::kGauge, "bytes", "restart_recovered_bytes",
      "Aligned bytes of the recovered objects (none was copied)."},
     [](const S& s) { return U(s.restart.recovered_bytes); }},
    {{"recovery_held_slots", K::kGauge, "objects", "restart_recovery_held_slots",
      "Slots of the crashed predecessor not served (staged, not checksummed, or changed since): "
      "kept from reuse for a write TTL at most (a hold an earlier recovery began keeps its end)."},
     [](const S& s) { return U(s.restart.recovery_held_slots); }},
    {{"recovery_held_bytes", K::kGauge, "bytes", "restart_recovery_held_bytes",
      "Bytes of the held slots."},
     [](const S& s) { return U(s.restart.recovery_held_bytes); }},
    {{"recovery_unsealed", K::kGauge, "objects", "restart_recovery_unsealed",
      "Of the held slots: objects committed but not yet checksummed when the predecessor died."},
     [](const S& s) { return U(s.restart.recovery_unsealed); }},
    {{"recovery_checksum_mismatches", K::kGauge, "objects",
      "restart_recovery_checksum_mismatches",
      "Of the held slots: objects whose bytes no longer match their checksum."},
     [](const S& s) { return U(s.restart.recovery_checksum_mismatches); }},
    {{"recovery_seconds", K::kGauge, "seconds", "restart_recovery_seconds",
      "Time to read the journal, verify every object and adopt the pool."},
     [](const S& s) { return F(s.restart.recovery_seconds); }},
    {{"journal_records", K::kGauge, "objects", "restart_journal_records",
      "Slots the crash-recovery journal records as lent or resident (--recover-pool)."},
     [](const S& s) { return U(s.journal.records); }},
    {{"journal_sealed", K::kGauge, "objects", "restart_journal_sealed",
      "Resident objects whose checksum is recorded: what a recovery would serve now."},
     [](const S& s) { return U(s.journal.sealed); }},
    {{"journal_awaiting_seal", K::kGauge, "objects", "restart_journal_awaiting_seal",
      "Committed objects whose checksum the sealer has not computed yet."},
     [](const S& s) { return U(s.journal.awaiting_seal); }},
    {{"journal_sealed_bytes", K::kCounter, "bytes", "restart_journal_sealed_bytes_total",
      "Bytes the sealer has checksummed since start."},
     [](const S& s) { return U(s.journal.sealed_bytes_total); }},
    {{"journal_unrecorded", K::kCounter, "objects", "restart_journal_unrecorded_total",
      "Objects not recoverable because their key did not fit the journal's namespace area."},
     [](const S& s) { return U(s.journal.unrecorded); }},
};

}  // namespace

const std::span<const Entry<S>> kRestart(kRestartRows);
const std::span<const Entry<OperationRow>> kOperation(kOperationRows);
const std::span<const Entry<S>> kTransportErrors(kTransportErrorsRows);
const std::span<const Entry<S>> kRouter(kRouterRows);
const std::span<const Entry<S>> kInstances(kInstancesRows);
const std::span<const Entry<S>> kReleased(kReleasedRows);
const std::span<const Entry<S>> kSessions(kSessionsRows);
const std::span<const Entry<S>> kParked(kParkedRows);
const std::span<const Entry<ParkedRow>> kParkedOperation(kParkedOperationRows);
const std::span<const Entry<S>> kLookup(kLookupRows);
const std::span<const Entry<S>> kBlockReports(kBlockReportsRows);
const std::span<const Entry<S>> kGpu(kGpuRows);
const std::span<const Entry<S>> kKvEvents(kKvEventsRows);

}  // namespace lmcache::server::stats_tables
