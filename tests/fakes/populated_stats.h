// A stats snapshot with every figure set, each to a value no other figure
// has (texts, numbers, flags and histograms alike), and every repeated group
// holding elements: the input of the tests that pin what the exporters write
// (stats_exports_test) and check that they agree (stats_schema_test).
//
// Written field by field by name, from the accessors of the schema as it was
// at 9c25edd, so that reordering or regenerating a stats struct cannot shift
// a value from one field to another unnoticed.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string>

#include "server/stats.h"

namespace lmcache::testing {

inline LatencyHistogram::Snapshot PopulatedHistogram(std::uint64_t seed) {
  LatencyHistogram::Snapshot h;
  h.buckets[seed % h.buckets.size()] = seed;
  h.buckets[(seed + 3) % h.buckets.size()] = 2;
  h.count = seed + 2;
  h.sum_us = seed * 70;
  return h;
}

// `with_l2`: the snapshot of a server with two L2 adapters, or of one without an L2 tier.
inline server::StatsSnapshot PopulatedStats(bool with_l2 = true) {
  std::uint64_t counter = 100;
  auto next = [&counter] { return ++counter; };
  auto Histogram = PopulatedHistogram;
  server::StatsSnapshot s;
  s.version = "text-" + std::to_string(next());
  s.boot_id = "text-" + std::to_string(next());
  s.uptime_seconds = next() + 0.5;
  s.allocator.capacity_bytes = next();
  s.allocator.used_bytes = next();
  s.table.resident_bytes = next();
  s.table.staging_bytes = next();
  s.table.locked_bytes = next();
  s.table.retired_bytes = next();
  s.table.resident_objects = next();
  s.table.staging_objects = next();
  s.table.locked_objects = next();
  s.table.retired_objects = next();
  s.table.quarantined_objects = next();
  s.table.quarantined_bytes = next();
  s.table.read_locks = next();
  s.table.read_leases = next();
  s.table.write_leases = next();
  s.table.expired_writes_reclaimed = next();
  s.flow.admitted_objects = next();
  s.flow.admitted_bytes = next();
  s.flow.tier_admitted_objects = next();
  s.flow.tier_admitted_bytes = next();
  s.flow.deleted_objects = next();
  s.flow.deleted_bytes = next();
  s.allocator.largest_allocatable_bytes = next();
  s.allocator.largest_free_run_bytes = next();
  s.allocator.pool_free_bytes = next();
  s.allocator.slab_slack_bytes = next();
  s.allocator.fragmentation = next() + 0.5;
  s.allocator.unready_bytes = next();
  s.prefault.ready_bytes = next();
  s.prefault.done = next() % 2 == 1;
  s.prefault.seconds = next() + 0.5;
  s.prefault.huge_page_bytes = next();
  s.allocator.allocations = next();
  s.allocator.frees = next();
  s.allocator.failed_allocations = next();
  s.evictor.passes = next();
  s.evictor.triggered_passes = next();
  s.evictor.errors = next();
  s.flow.evicted_objects = next();
  s.flow.evicted_bytes = next();
  s.evictor.evicted_objects = next();
  s.evictor.evicted_bytes = next();
  s.evictor.nudges = next();
  s.evictor.reclaimed_objects = next();
  s.table.on_demand_evictions = next();
  s.evictor.last_success_wall_seconds = next() + 0.5;
  s.refused_requests = next();
  s.transport.received = next();
  s.transport.replied = next();
  s.transport.undeliverable = next();
  s.transport.refused = next();
  s.transport.stream_items = next();
  s.transport.stream_controls = next();
  s.transport.bad_controls = next();
  s.transport.overloaded = next();
  s.transport.queued_requests = next();
  s.transport.queued_bytes = next();
  s.transport.connections = next();
  s.transport.disconnects = next();
  s.instances.instances = next();
  s.instances.pending_writes = next();
  s.instances.pending_reads = next();
  s.sessions = next();
  s.session_bytes = next();
  s.sessions_dropped_for_memory = next();
  s.parked.requests = next();
  s.lookups = next();
  s.lookup_requested_tokens = next();
  s.lookup_hit_tokens = next();
  s.hash_cache.hits = next();
  s.hash_cache.misses = next();
  s.hash_cache.entries = next();
  s.hash_cache.bytes = next();
  s.block_allocation_reports = next();
  s.gpu.contexts = next();
  s.gpu.closing = next();
  s.gpu.transfers_in_flight = next();
  s.gpu.mapped_allocations = next();
  s.gpu.mapped_bytes = next();
  s.kv_events.log.enabled = next() % 2 == 1;
  s.kv_events.log.recording = next() % 2 == 1;
  s.kv_events.log.incarnation = next();
  s.kv_events.log.depth = next();
  s.kv_events.log.bytes = next();
  s.kv_events.log.capacity = next();
  s.kv_events.log.next_seq = next();
  s.kv_events.log.appended = next();
  s.kv_events.log.dropped = next();
  s.kv_events.recorder.unbound_stores = next();
  s.kv_events.recorder.binding_bytes = next();
  s.kv_events.log.watchers = next();
  s.kv_events.streams.open = next();
  s.kv_events.streams.opened = next();
  s.kv_events.streams.batches = next();
  s.kv_events.streams.stale_controls = next();
  s.kv_events.publisher.messages = next();
  s.kv_events.publisher.events = next();
  s.kv_events.publisher.clears_for_loss = next();
  s.kv_events.publisher.replays = next();
  s.restart.took_over = next() % 2 == 1;
  s.restart.adopted_objects = next();
  s.restart.adopted_bytes = next();
  s.restart.adopted_read_locked = next();
  s.restart.dropped_staged = next();
  s.restart.dropped_staged_bytes = next();
  s.restart.carried_registrations = next();
  s.restart.takeover_seconds = next() + 0.5;
  s.restart.recovered = next() % 2 == 1;
  s.restart.recovered_objects = next();
  s.restart.recovered_bytes = next();
  s.restart.recovery_held_slots = next();
  s.restart.recovery_held_bytes = next();
  s.restart.recovery_unsealed = next();
  s.restart.recovery_checksum_mismatches = next();
  s.restart.recovery_seconds = next() + 0.5;
  s.journal.records = next();
  s.journal.sealed = next();
  s.journal.awaiting_seal = next();
  s.journal.sealed_bytes_total = next();
  s.journal.unrecorded = next();
  s.prefault.total_bytes = s.prefault.ready_bytes * 2;
  for (std::uint64_t& released : s.released_instances) released = next();
  for (std::uint64_t object_bytes : {4096, 65536}) {
    alloc::ClassStats c;
    c.object_bytes = next();
    c.objects_per_slab = next();
    c.slabs = next();
    c.used_objects = next();
    c.free_objects = next();
    c.object_bytes = object_bytes;
    s.allocator.classes.push_back(c);
  }
  for (const char* name : {"lookup", "store", "never_called"}) {
    server::OperationStats o;
    o.name = name;
    o.requests = next();
    o.errors = next();
    o.latency = Histogram(next());
    if (o.name == "never_called") o.requests = 0;  // rows never called are left out
    s.operations.push_back(o);
  }
  for (const char* name : {"wait_prefetch_status", "p2p_query_lookup_results"}) {
    server::ParkedOpStats p;
    p.parked = next();
    p.refused = next();
    for (std::uint64_t& ended : p.ended) ended = next();
    s.parked.by_operation[name] = p;
  }
  // Figures added after the goldens were first written count from their own
  // base, so that every value before them keeps its number.
  std::uint64_t later = 90'000;
  auto next_later = [&later] { return ++later; };
  s.transport.fleet_admitted = next_later();
  s.transport.fleet_refused = next_later();
  s.p2p_served.tasks = next_later();
  s.p2p_served.locked_objects = next_later();
  s.p2p_served.locked_bytes = next_later();
  s.p2p_served.lookups = next_later();
  s.p2p_served.requested_keys = next_later();
  s.p2p_served.hit_keys = next_later();
  s.p2p_served.size_mismatches = next_later();
  s.p2p_served.unservable_keys = next_later();
  s.p2p_served.refused_keys = next_later();
  s.p2p_served.untrusted_keys = next_later();
  s.p2p_served.reaped_tasks = next_later();
  s.p2p_served.displaced_tasks = next_later();
  s.p2p_served.unknown_queries = next_later();
  s.p2p_served.unlocked = next_later();
  s.p2p_served.stale_unlocks = next_later();
  for (std::uint64_t* figure :
       {&s.p2p_peers.connecting, &s.p2p_peers.ready, &s.p2p_peers.excluded,
        &s.p2p_peers.unreachable, &s.p2p_peers.new_lives, &s.p2p_peers.resolve_failures,
        &s.p2p_rpc.peers, &s.p2p_rpc.calls, &s.p2p_rpc.replies, &s.p2p_rpc.timeouts,
        &s.p2p_rpc.unsent, &s.p2p_rpc.late_replies, &s.p2p_rpc.stray_replies,
        &s.p2p_channel.peers, &s.p2p_channel.reads, &s.p2p_channel.read_bytes,
        &s.p2p_channel.failed_reads, &s.p2p_channel.deadline_reads,
        &s.p2p_channel.refused_reads, &s.p2p_channel.served_reads,
        &s.p2p_channel.served_bytes, &s.p2p_channel.refused_serves,
        &s.p2p_channel.late_replies}) {
    *figure = next_later();
  }
  // Quotas: their own sequence, so the figures above and below keep theirs.
  std::uint64_t quota_counter = 9000;
  auto quota_next = [&quota_counter] { return ++quota_counter; };
  s.quota.mode = "on";
  s.quota.tenants_with_quota = 2;
  s.quota.other_tenants = quota_next();
  s.quota.other_used_bytes = quota_next();
  s.quota.other_refused_objects = quota_next();
  s.table.over_quota_objects = quota_next();
  s.table.quota_evictions = quota_next();
  s.table.pinned_objects = quota_next();
  s.table.pinned_bytes = quota_next();
  for (const char* salt : {"_default", "tenant-a"}) {
    store::TenantQuotaStats& t = s.quota.tenants.emplace_back();
    t.salt = salt;
    t.limit_bytes = quota_next();
    t.used_bytes = quota_next();
    t.refused_objects = quota_next();
    t.refused_bytes = quota_next();
    t.quota_evicted_objects = quota_next();
    t.quota_evicted_bytes = quota_next();
  }
  if (!with_l2) return s;
  tier::L2Stats l;
  // The cascade's figures count from their own base, so that adding them
  // moved no other figure.
  std::uint64_t cascade_counter = 9500;
  auto cascade_next = [&cascade_counter] { return ++cascade_counter; };
  std::uint64_t cost_counter = 9700;  // the load-or-recompute figures, added later still
  auto cost_next = [&cost_counter] { return ++cost_counter; };
  std::uint64_t serde_counter = 9800;  // the serde's figures (issue 64)
  auto serde_next = [&serde_counter] { return ++serde_counter; };
  for (const char* type : {"fs", "resp"}) {
    tier::L2AdapterStats a;
    a.type = "text-" + std::to_string(next());
    a.description = "text-" + std::to_string(next());
    a.io_engine = "text-" + std::to_string(next());
    a.stored_objects = next();
    a.stored_bytes = next();
    a.store_failures = next();
    a.loaded_objects = next();
    a.loaded_bytes = next();
    a.load_misses = next();
    a.load_failures = next();
    a.checksum_failures = next();
    a.evicted_objects = next();
    a.evicted_bytes = next();
    a.objects = next();
    a.usage_bytes = next();
    a.capacity_bytes = next();
    a.condition = "text-" + std::to_string(next());
    a.rebuild_seconds = next() + 0.5;
    a.rebuilt_objects = next();
    a.storing_objects = next();
    a.loading_objects = next();
    a.looking_up_keys = next();
    a.store_latency = Histogram(next());
    a.lookup_latency = Histogram(next());
    a.load_latency = Histogram(next());
    a.type = type;
    a.name = a.type + "-" + std::to_string(l.adapters.size() + 1);
    a.over_quota_stores = cascade_next();
    a.load_seconds_per_object = static_cast<double>(cost_next()) + 0.25;
    a.declined_slower_than_recompute = cost_next();
    a.serde = "text-" + std::to_string(serde_next());
    a.serde_encoded_objects = serde_next();
    a.serde_encoded_object_bytes = serde_next();
    a.serde_encoded_bytes = serde_next();
    a.serde_raw_objects = serde_next();
    if (a.type == "fs") a.condition.clear();  // one healthy adapter, one not
    l.adapters.push_back(a);
  }
  l.cascade.added = cascade_next();
  l.cascade.removed = cascade_next();
  l.cascade.draining = cascade_next();
  l.store.queued_objects = next();
  l.store.queued_bytes = next();
  l.store.in_flight = next();
  l.store.stored = next();
  l.store.failed = next();
  l.store.skipped_queue_full = next();
  l.store.skipped_gone = next();
  l.store.dropped_at_stop = next();
  l.store.deleted_from_l1 = next();
  l.prefetch.submitted = next();
  l.prefetch.queued = next();
  l.prefetch.in_flight = next();
  l.prefetch.completed = next();
  l.prefetch.cancelled = next();
  l.prefetch.refused = next();
  l.prefetch.l2_hit_chunks = next();
  l.prefetch.loaded_chunks = next();
  l.prefetch.load_failed_chunks = next();
  l.prefetch.no_memory_chunks = next();
  l.prefetch.deadline_expired = next();
  l.prefetch.abandoned_loads = next();
  l.prefetch.abandoned_in_flight = next();
  l.prefetch.latency = Histogram(next());
  // Figures added later come last, so that the earlier ones keep their values.
  l.prefetch.engine_held_chunks = next();
  l.prefetch.declined_slower_than_recompute = next();
  s.l2 = l;
  s.lookups_skip_load = next();
  s.lookups_engine_hinted = next();
  s.lookup_engine_held_tokens = next();
  s.lookup_decode_latency = Histogram(next());
  s.lookup_hash_latency = Histogram(next());
  s.lookup_lock_latency = Histogram(next());
  return s;
}

}  // namespace lmcache::testing
