#include "server/stats.h"

#include "common/msgpack_codec.h"

namespace lmcache::server {
namespace {

std::string L1Map(const StatsSnapshot& s) {
  mp::MapWriter m;
  m.Field("capacity_bytes").Uint(s.allocator.capacity_bytes);
  m.Field("used_bytes").Uint(s.allocator.used_bytes);
  m.Field("resident_bytes").Uint(s.table.resident_bytes);
  m.Field("staging_bytes").Uint(s.table.staging_bytes);
  m.Field("locked_bytes").Uint(s.table.locked_bytes);
  m.Field("retired_bytes").Uint(s.table.retired_bytes);
  m.Field("resident_objects").Uint(s.table.resident_objects);
  m.Field("staging_objects").Uint(s.table.staging_objects);
  m.Field("locked_objects").Uint(s.table.locked_objects);
  m.Field("retired_objects").Uint(s.table.retired_objects);
  m.Field("quarantined_objects").Uint(s.table.quarantined_objects);
  m.Field("quarantined_bytes").Uint(s.table.quarantined_bytes);
  m.Field("read_locks").Uint(s.table.read_locks);
  m.Field("read_leases").Uint(s.table.read_leases);
  m.Field("write_leases").Uint(s.table.write_leases);
  m.Field("expired_writes_reclaimed").Uint(s.table.expired_writes_reclaimed);
  m.Field("admitted_objects").Uint(s.flow.admitted_objects);
  m.Field("admitted_bytes").Uint(s.flow.admitted_bytes);
  m.Field("tier_admitted_objects").Uint(s.flow.tier_admitted_objects);
  m.Field("tier_admitted_bytes").Uint(s.flow.tier_admitted_bytes);
  m.Field("deleted_objects").Uint(s.flow.deleted_objects);
  m.Field("deleted_bytes").Uint(s.flow.deleted_bytes);
  m.Field("largest_allocatable_bytes").Uint(s.allocator.largest_allocatable_bytes);
  m.Field("largest_free_run_bytes").Uint(s.allocator.largest_free_run_bytes);
  m.Field("pool_free_bytes").Uint(s.allocator.pool_free_bytes);
  m.Field("slab_slack_bytes").Uint(s.allocator.slab_slack_bytes);
  m.Field("fragmentation").Float(s.allocator.fragmentation);
  m.Field("unready_bytes").Uint(s.allocator.unready_bytes);
  m.Field("prefault_ready_bytes").Uint(s.prefault.ready_bytes);
  m.Field("prefault_done").Bool(s.prefault.done);
  m.Field("prefault_seconds").Float(s.prefault.seconds);
  m.Field("huge_page_bytes").Uint(s.prefault.huge_page_bytes);
  m.Field("allocations").Uint(s.allocator.allocations);
  m.Field("frees").Uint(s.allocator.frees);
  m.Field("failed_allocations").Uint(s.allocator.failed_allocations);
  mp::Encoder classes;
  for (const alloc::ClassStats& c : s.allocator.classes) {
    mp::MapWriter cm;
    cm.Field("object_bytes").Uint(c.object_bytes);
    cm.Field("objects_per_slab").Uint(c.objects_per_slab);
    cm.Field("slabs").Uint(c.slabs);
    cm.Field("used_objects").Uint(c.used_objects);
    cm.Field("free_objects").Uint(c.free_objects);
    classes.Raw(cm.Take());
  }
  m.Field("size_classes")
      .Array(static_cast<std::uint32_t>(s.allocator.classes.size()))
      .Raw(classes.bytes());
  return m.Take();
}

std::string EvictionMap(const StatsSnapshot& s) {
  mp::MapWriter m;
  m.Field("passes").Uint(s.evictor.passes);
  m.Field("triggered_passes").Uint(s.evictor.triggered_passes);
  m.Field("errors").Uint(s.evictor.errors);
  m.Field("evicted_objects").Uint(s.flow.evicted_objects);
  m.Field("evicted_bytes").Uint(s.flow.evicted_bytes);
  m.Field("background_evicted_objects").Uint(s.evictor.evicted_objects);
  m.Field("background_evicted_bytes").Uint(s.evictor.evicted_bytes);
  m.Field("nudged_passes").Uint(s.evictor.nudges);
  m.Field("reclaimed_objects").Uint(s.evictor.reclaimed_objects);
  m.Field("on_demand_evictions").Uint(s.table.on_demand_evictions);
  m.Field("last_success_unix_seconds").Float(s.evictor.last_success_wall_seconds);
  return m.Take();
}

std::string OperationsMap(const StatsSnapshot& s) {
  mp::MapWriter m;
  for (const OperationStats& op : s.operations) {
    if (op.requests == 0) continue;
    mp::MapWriter om;
    om.Field("requests").Uint(op.requests);
    om.Field("errors").Uint(op.errors);
    om.Field("latency_sum_us").Uint(op.latency.sum_us);
    mp::Encoder buckets;
    for (const std::uint64_t n : op.latency.buckets) buckets.Uint(n);
    om.Field("latency_buckets_us")
        .Array(static_cast<std::uint32_t>(op.latency.buckets.size()))
        .Raw(buckets.bytes());
    m.Field(op.name).Raw(om.Take());
  }
  return m.Take();
}

std::string TransportMap(const StatsSnapshot& s) {
  mp::MapWriter m;
  m.Field("received").Uint(s.transport.received);
  m.Field("replied").Uint(s.transport.replied);
  m.Field("undeliverable").Uint(s.transport.undeliverable);
  m.Field("refused").Uint(s.transport.refused);
  m.Field("overloaded").Uint(s.transport.overloaded);
  m.Field("queued_requests").Uint(s.transport.queued_requests);
  m.Field("queued_bytes").Uint(s.transport.queued_bytes);
  m.Field("connections").Uint(s.transport.connections);
  m.Field("disconnects").Uint(s.transport.disconnects);
  return m.Take();
}

std::string InstancesMap(const StatsSnapshot& s) {
  mp::MapWriter m;
  m.Field("registered").Uint(s.instances.instances);
  m.Field("pending_writes").Uint(s.instances.pending_writes);
  m.Field("pending_reads").Uint(s.instances.pending_reads);
  const auto released = [&s](ReleaseCause cause) {
    return s.released_instances[static_cast<std::size_t>(cause)];
  };
  // The first names, kept for existing dashboards: departed = disconnected.
  m.Field("reaped").Uint(released(ReleaseCause::kReaped));
  m.Field("replaced").Uint(released(ReleaseCause::kReplaced));
  m.Field("departed").Uint(released(ReleaseCause::kDisconnected));
  mp::MapWriter by_cause;
  for (std::size_t cause = 0; cause < kReleaseCauses; ++cause) {
    by_cause.Field(ReleaseCauseName(static_cast<ReleaseCause>(cause)))
        .Uint(s.released_instances[cause]);
  }
  m.Field("released").Raw(by_cause.Take());
  return m.Take();
}

std::string ParkedMap(const ParkedStats& parked) {
  mp::MapWriter m;
  m.Field("requests").Uint(parked.requests);
  mp::MapWriter by_operation;
  for (const auto& [name, op] : parked.by_operation) {
    mp::MapWriter o;
    o.Field("parked").Uint(op.parked);
    o.Field("refused").Uint(op.refused);
    for (std::size_t end = 0; end < kParkEnds; ++end) {
      o.Field(ParkEndName(static_cast<ParkEnd>(end))).Uint(op.ended[end]);
    }
    by_operation.Field(name).Raw(o.Take());
  }
  m.Field("operations").Raw(by_operation.Take());
  return m.Take();
}

std::string LookupMap(const StatsSnapshot& s) {
  mp::MapWriter m;
  m.Field("lookups").Uint(s.lookups);
  m.Field("requested_tokens").Uint(s.lookup_requested_tokens);
  m.Field("hit_tokens").Uint(s.lookup_hit_tokens);
  m.Field("hash_cache_hits").Uint(s.hash_cache.hits);
  m.Field("hash_cache_misses").Uint(s.hash_cache.misses);
  m.Field("hash_cache_entries").Uint(s.hash_cache.entries);
  m.Field("hash_cache_bytes").Uint(s.hash_cache.bytes);
  return m.Take();
}

std::string Histogram(const LatencyHistogram::Snapshot& h) {
  mp::MapWriter m;
  m.Field("count").Uint(h.count);
  m.Field("sum_us").Uint(h.sum_us);
  mp::Encoder buckets;
  for (const std::uint64_t n : h.buckets) buckets.Uint(n);
  m.Field("buckets_us").Array(static_cast<std::uint32_t>(h.buckets.size())).Raw(buckets.bytes());
  return m.Take();
}

std::string AdapterMap(const tier::L2AdapterStats& a) {
  mp::MapWriter m;
  m.Field("type").Str(a.type);
  m.Field("description").Str(a.description);
  m.Field("stored_objects").Uint(a.stored_objects);
  m.Field("stored_bytes").Uint(a.stored_bytes);
  m.Field("store_failures").Uint(a.store_failures);
  m.Field("loaded_objects").Uint(a.loaded_objects);
  m.Field("loaded_bytes").Uint(a.loaded_bytes);
  m.Field("load_misses").Uint(a.load_misses);
  m.Field("load_failures").Uint(a.load_failures);
  m.Field("checksum_failures").Uint(a.checksum_failures);
  m.Field("evicted_objects").Uint(a.evicted_objects);
  m.Field("evicted_bytes").Uint(a.evicted_bytes);
  m.Field("objects").Uint(a.objects);
  m.Field("usage_bytes").Uint(a.usage_bytes);
  m.Field("capacity_bytes").Uint(a.capacity_bytes);
  m.Field("condition").Str(a.condition);
  m.Field("rebuild_seconds").Float(a.rebuild_seconds);
  m.Field("rebuilt_objects").Uint(a.rebuilt_objects);
  m.Field("storing_objects").Uint(a.storing_objects);
  m.Field("loading_objects").Uint(a.loading_objects);
  m.Field("looking_up_keys").Uint(a.looking_up_keys);
  m.Field("store_latency").Raw(Histogram(a.store_latency));
  m.Field("lookup_latency").Raw(Histogram(a.lookup_latency));
  m.Field("load_latency").Raw(Histogram(a.load_latency));
  return m.Take();
}

std::string L2Map(const tier::L2Stats& l2) {
  mp::Encoder adapters;
  for (const tier::L2AdapterStats& a : l2.adapters) adapters.Raw(AdapterMap(a));
  mp::MapWriter store;
  store.Field("queued_objects").Uint(l2.store.queued_objects);
  store.Field("queued_bytes").Uint(l2.store.queued_bytes);
  store.Field("in_flight").Uint(l2.store.in_flight);
  store.Field("stored").Uint(l2.store.stored);
  store.Field("failed").Uint(l2.store.failed);
  store.Field("skipped_queue_full").Uint(l2.store.skipped_queue_full);
  store.Field("skipped_gone").Uint(l2.store.skipped_gone);
  store.Field("dropped_at_stop").Uint(l2.store.dropped_at_stop);
  store.Field("deleted_from_l1").Uint(l2.store.deleted_from_l1);
  mp::MapWriter prefetch;
  prefetch.Field("submitted").Uint(l2.prefetch.submitted);
  prefetch.Field("queued").Uint(l2.prefetch.queued);
  prefetch.Field("in_flight").Uint(l2.prefetch.in_flight);
  prefetch.Field("completed").Uint(l2.prefetch.completed);
  prefetch.Field("cancelled").Uint(l2.prefetch.cancelled);
  prefetch.Field("refused").Uint(l2.prefetch.refused);
  prefetch.Field("l2_hit_chunks").Uint(l2.prefetch.l2_hit_chunks);
  prefetch.Field("loaded_chunks").Uint(l2.prefetch.loaded_chunks);
  prefetch.Field("load_failed_chunks").Uint(l2.prefetch.load_failed_chunks);
  prefetch.Field("no_memory_chunks").Uint(l2.prefetch.no_memory_chunks);
  prefetch.Field("deadline_expired").Uint(l2.prefetch.deadline_expired);
  prefetch.Field("abandoned_loads").Uint(l2.prefetch.abandoned_loads);
  prefetch.Field("abandoned_in_flight").Uint(l2.prefetch.abandoned_in_flight);
  prefetch.Field("latency").Raw(Histogram(l2.prefetch.latency));
  mp::MapWriter m;
  m.Field("adapters").Array(static_cast<std::uint32_t>(l2.adapters.size())).Raw(adapters.bytes());
  m.Field("store").Raw(store.Take());
  m.Field("prefetch").Raw(prefetch.Take());
  return m.Take();
}

}  // namespace

std::string EncodeStatsMsgpack(const StatsSnapshot& s) {
  mp::MapWriter m;
  m.Field("version").Str(s.version);
  m.Field("boot_id").Str(s.boot_id);
  m.Field("uptime_seconds").Float(s.uptime_seconds);
  m.Field("l1").Raw(L1Map(s));
  m.Field("eviction").Raw(EvictionMap(s));
  m.Field("operations").Raw(OperationsMap(s));
  m.Field("transport_errors").Uint(s.refused_requests);
  m.Field("router").Raw(TransportMap(s));
  m.Field("instances").Raw(InstancesMap(s));
  m.Field("sessions").Uint(s.sessions);
  m.Field("session_bytes").Uint(s.session_bytes);
  m.Field("sessions_dropped_for_memory").Uint(s.sessions_dropped_for_memory);
  m.Field("parked").Raw(ParkedMap(s.parked));
  if (s.l2) {
    m.Field("l2").Raw(L2Map(*s.l2));
  } else {
    m.Field("l2").Nil();
  }
  m.Field("lookup").Raw(LookupMap(s));
  m.Field("block_allocation_reports").Uint(s.block_allocation_reports);
  mp::MapWriter gpu;
  gpu.Field("contexts").Uint(s.gpu.contexts);
  gpu.Field("closing_contexts").Uint(s.gpu.closing);
  gpu.Field("transfers_in_flight").Uint(s.gpu.transfers_in_flight);
  gpu.Field("mapped_allocations").Uint(s.gpu.mapped_allocations);
  gpu.Field("mapped_bytes").Uint(s.gpu.mapped_bytes);
  m.Field("gpu").Raw(gpu.Take());
  return m.Take();
}

}  // namespace lmcache::server
