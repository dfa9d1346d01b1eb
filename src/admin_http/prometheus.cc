#include "admin_http/prometheus.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

namespace lmcache::ops {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // The shortest form that reads back as the same double.
  char buffer[64];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

std::string LabelText(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (std::size_t i = 0; i < labels.size(); ++i) {
    out += (i ? "," : "") + labels[i].first + "=\"" + EscapeLabel(labels[i].second) + "\"";
  }
  return out + "}";
}

// Metric families in the order first written; every sample of a family
// together under one HELP and TYPE, as the format requires.
class Exposition {
 public:
  void Gauge(const std::string& name, const std::string& help, double value,
             const Labels& labels = {}) {
    Family(name, help, "gauge").push_back(name + LabelText(labels) + " " + Number(value));
  }
  void Counter(const std::string& name, const std::string& help, double value,
               const Labels& labels = {}) {
    Family(name, help, "counter").push_back(name + LabelText(labels) + " " + Number(value));
  }
  // A LatencyHistogram (microsecond buckets) in seconds, cumulative.
  void Histogram(const std::string& name, const std::string& help,
                 const LatencyHistogram::Snapshot& h, const Labels& labels = {}) {
    std::vector<std::string>& lines = Family(name, help, "histogram");
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < h.buckets.size(); ++i) {
      cumulative += h.buckets[i];
      Labels with_le = labels;
      with_le.emplace_back("le", i < LatencyHistogram::kBoundsUs.size()
                                     ? Number(static_cast<double>(LatencyHistogram::kBoundsUs[i]) / 1e6)
                                     : "+Inf");
      lines.push_back(name + "_bucket" + LabelText(with_le) + " " + std::to_string(cumulative));
    }
    lines.push_back(name + "_sum" + LabelText(labels) + " " +
                    Number(static_cast<double>(h.sum_us) / 1e6));
    lines.push_back(name + "_count" + LabelText(labels) + " " + std::to_string(h.count));
  }
  std::string Take() const {
    std::string out;
    for (const std::string& name : order_) {
      const Entry& e = families_.at(name);
      out += "# HELP " + name + " " + e.help + "\n# TYPE " + name + " " + e.type + "\n";
      for (const std::string& line : e.lines) out += line + "\n";
    }
    return out;
  }

 private:
  struct Entry {
    std::string help;
    std::string type;
    std::vector<std::string> lines;
  };
  std::vector<std::string>& Family(const std::string& name, const std::string& help,
                                   const std::string& type) {
    auto [it, inserted] = families_.try_emplace(name);
    if (inserted) {
      it->second.help = help;
      it->second.type = type;
      order_.push_back(name);
    }
    return it->second.lines;
  }
  std::map<std::string, Entry> families_;
  std::vector<std::string> order_;
};

constexpr const char* P = "lmcache_mp_";

void L1(Exposition& x, const server::StatsSnapshot& s) {
  const std::string p = P;
  const auto& a = s.allocator;
  const auto& t = s.table;
  x.Gauge(p + "l1_capacity_bytes", "L1 pool size in bytes.", static_cast<double>(a.capacity_bytes));
  x.Gauge(p + "l1_memory_usage_bytes", "L1 bytes held by objects (resident, staging, retired).",
          static_cast<double>(a.used_bytes));
  x.Gauge(p + "l1_usage_ratio", "L1 bytes in use over the pool size.",
          a.capacity_bytes ? static_cast<double>(a.used_bytes) / static_cast<double>(a.capacity_bytes) : 0);
  x.Gauge(p + "l1_staging_bytes", "L1 bytes staged by writers, not yet committed.",
          static_cast<double>(t.staging_bytes));
  x.Gauge(p + "l1_locked_bytes", "L1 bytes under a live read or write lease.",
          static_cast<double>(t.locked_bytes));
  x.Gauge(p + "l1_retired_bytes", "L1 bytes deleted while locked, freed when their lease ends.",
          static_cast<double>(t.retired_bytes));
  x.Gauge(p + "l1_quarantined_bytes",
          "L1 bytes a worker staged and did not commit within its write lease, kept from reuse "
          "until the worker's registration ends.",
          static_cast<double>(t.quarantined_bytes));
  x.Gauge(p + "l1_resident_objects", "Objects readable in L1.", static_cast<double>(t.resident_objects));
  x.Gauge(p + "l1_read_leases", "Live read leases.", static_cast<double>(t.read_leases));
  x.Gauge(p + "l1_write_leases", "Live write leases.", static_cast<double>(t.write_leases));
  x.Gauge(p + "l1_fragmentation_ratio", "1 - largest free page run / free pages.", a.fragmentation);
  x.Gauge(p + "l1_prefault_ratio", "Fraction of the pool pre-faulted and usable.",
          s.prefault.total_bytes ? static_cast<double>(s.prefault.ready_bytes) /
                                       static_cast<double>(s.prefault.total_bytes)
                                 : 0);
  x.Gauge(p + "l1_huge_page_bytes",
          "Bytes of the pool the kernel maps with huge pages (measured once pre-faulted).",
          static_cast<double>(s.prefault.huge_page_bytes));
  x.Counter(p + "l1_allocation_failure_total", "Allocations that found no memory.",
            static_cast<double>(a.failed_allocations));
  x.Counter(p + "l1_write_total", "Objects admitted into L1, by where they came from.",
            static_cast<double>(s.flow.admitted_objects), {{"source", "client"}});
  x.Counter(p + "l1_write_total", "", static_cast<double>(s.flow.tier_admitted_objects),
            {{"source", "l2"}});
  x.Counter(p + "l1_write_bytes_total", "Bytes admitted into L1, by where they came from.",
            static_cast<double>(s.flow.admitted_bytes), {{"source", "client"}});
  x.Counter(p + "l1_write_bytes_total", "", static_cast<double>(s.flow.tier_admitted_bytes),
            {{"source", "l2"}});
  x.Counter(p + "l1_evicted_total", "Objects evicted from L1.", static_cast<double>(s.flow.evicted_objects));
  x.Counter(p + "l1_evicted_bytes_total", "Bytes evicted from L1.", static_cast<double>(s.flow.evicted_bytes));
  x.Counter(p + "l1_deleted_total", "Objects deleted from L1 (clear, delete).",
            static_cast<double>(s.flow.deleted_objects));
  x.Counter(p + "l1_eviction_loop_ticks_total", "Background eviction passes.",
            static_cast<double>(s.evictor.passes));
  x.Counter(p + "l1_eviction_loop_triggered_total", "Passes that found usage over the trigger.",
            static_cast<double>(s.evictor.triggered_passes));
  x.Counter(p + "l1_eviction_loop_errors_total", "Passes that failed (the loop goes on).",
            static_cast<double>(s.evictor.errors));
  x.Counter(p + "l1_on_demand_evictions_total", "Stores that evicted to make room.",
            static_cast<double>(t.on_demand_evictions));
  x.Gauge(p + "l1_eviction_last_success_timestamp_seconds",
          "Unix time of the last completed eviction pass.", s.evictor.last_success_wall_seconds);
}

void Requests(Exposition& x, const server::StatsSnapshot& s) {
  const std::string p = P;
  for (const server::OperationStats& op : s.operations) {
    if (op.requests == 0) continue;
    const Labels labels = {{"operation", op.name}};
    x.Counter(p + "requests_total", "Requests run, by operation.", static_cast<double>(op.requests), labels);
    x.Counter(p + "request_errors_total", "Requests that failed, by operation.",
              static_cast<double>(op.errors), labels);
    x.Histogram(p + "request_duration_seconds", "Time to run a request, by operation.",
                op.latency, labels);
  }
  x.Counter(p + "requests_received_total", "Requests received by the transport.",
            static_cast<double>(s.transport.received));
  x.Counter(p + "requests_refused_total", "Requests answered with an error before running.",
            static_cast<double>(s.transport.refused));
  x.Counter(p + "requests_overloaded_total", "Requests refused because a queue was full (402).",
            static_cast<double>(s.transport.overloaded));
  x.Counter(p + "replies_undeliverable_total", "Replies whose client had gone.",
            static_cast<double>(s.transport.undeliverable));
  x.Gauge(p + "router_queued_requests", "Requests waiting in the worker pools.",
          static_cast<double>(s.transport.queued_requests));
  x.Gauge(p + "router_queued_bytes", "Bytes of requests waiting in the worker pools.",
          static_cast<double>(s.transport.queued_bytes));
  x.Gauge(p + "connections", "Client connections open.", static_cast<double>(s.transport.connections));
  x.Counter(p + "lookups_total", "Lookups.", static_cast<double>(s.lookups));
  x.Counter(p + "lookup_requested_total", "Tokens looked up.", static_cast<double>(s.lookup_requested_tokens));
  x.Counter(p + "lookup_hit_total", "Tokens found cached by lookups (L1 prefix).",
            static_cast<double>(s.lookup_hit_tokens));
  x.Counter(p + "hash_cache_hits_total", "Chunk hashes answered by the hash cache.",
            static_cast<double>(s.hash_cache.hits));
  x.Counter(p + "hash_cache_misses_total", "Chunk hashes computed.", static_cast<double>(s.hash_cache.misses));
  x.Gauge(p + "sessions", "Request sessions held.", static_cast<double>(s.sessions));
  x.Gauge(p + "session_bytes", "Memory held by request sessions.", static_cast<double>(s.session_bytes));
  x.Counter(p + "sessions_dropped_total", "Sessions dropped for memory.",
            static_cast<double>(s.sessions_dropped_for_memory));
  x.Gauge(p + "parked_requests", "Requests waiting without a thread (deferred replies).",
          static_cast<double>(s.parked.requests));
  for (const auto& [name, op] : s.parked.by_operation) {
    const Labels l = {{"operation", name}};
    x.Counter(p + "parked_total", "Requests parked to answer later, by operation.",
              static_cast<double>(op.parked), l);
    x.Counter(p + "parked_refused_total",
              "Requests answered at once (402) because too many were parked, by operation.",
              static_cast<double>(op.refused), l);
    for (std::size_t end = 0; end < server::kParkEnds; ++end) {
      x.Counter(p + "parked_ended_total",
                "Parked requests answered, by operation and why (woken: what they waited for "
                "came; deadline: their timeout passed, a deadline miss; closed: their client "
                "went; drained: the server stopped).",
                static_cast<double>(op.ended[end]),
                {{"operation", name},
                 {"end", std::string(server::ParkEndName(static_cast<server::ParkEnd>(end)))}});
    }
  }
  x.Gauge(p + "instances", "Registered worker instances.", static_cast<double>(s.instances.instances));
  x.Gauge(p + "pending_writes", "prepare_store calls waiting for their commit.",
          static_cast<double>(s.instances.pending_writes));
  x.Gauge(p + "pending_reads", "prepare_retrieve calls waiting for their commit.",
          static_cast<double>(s.instances.pending_reads));
  const auto released = [&s](server::ReleaseCause cause) {
    return static_cast<double>(s.released_instances[static_cast<std::size_t>(cause)]);
  };
  x.Counter(p + "instances_reaped_total", "Instances unregistered by the reaper.",
            released(server::ReleaseCause::kReaped));
  x.Counter(p + "instances_departed_total", "Instances whose connection closed.",
            released(server::ReleaseCause::kDisconnected));
  for (std::size_t cause = 0; cause < server::kReleaseCauses; ++cause) {
    x.Counter(p + "instances_released_total",
              cause == 0 ? "Registrations ended, by cause (unregistered, disconnected, reaped, "
                           "replaced)."
                         : "",
              static_cast<double>(s.released_instances[cause]),
              {{"cause", server::ReleaseCauseName(static_cast<server::ReleaseCause>(cause))}});
  }
  x.Gauge(p + "gpu_contexts", "GPU registrations with a device context (CUDA-IPC path).",
          static_cast<double>(s.gpu.contexts));
  x.Gauge(p + "gpu_closing_contexts", "Device contexts of departed workers waiting for their copies.",
          static_cast<double>(s.gpu.closing));
  x.Gauge(p + "gpu_transfers_in_flight", "GPU stores and retrieves queued or copying.",
          static_cast<double>(s.gpu.transfers_in_flight));
  x.Gauge(p + "gpu_mapped_allocations", "Workers' GPU allocations mapped through IPC handles.",
          static_cast<double>(s.gpu.mapped_allocations));
  x.Gauge(p + "gpu_mapped_bytes", "Bytes of the workers' GPU allocations mapped through IPC handles.",
          static_cast<double>(s.gpu.mapped_bytes));
}

void L2(Exposition& x, const tier::L2Stats& l2) {
  const std::string p = P;
  for (std::size_t i = 0; i < l2.adapters.size(); ++i) {
    const tier::L2AdapterStats& a = l2.adapters[i];
    const Labels l = {{"l2_name", a.type + "#" + std::to_string(i + 1)}};
    x.Counter(p + "l2_store_completed_objects_total", "Objects written to the L2 adapter.",
              static_cast<double>(a.stored_objects), l);
    x.Counter(p + "l2_store_completed_bytes_total", "Bytes written to the L2 adapter.",
              static_cast<double>(a.stored_bytes), l);
    x.Counter(p + "l2_store_failures_total", "Writes the L2 adapter failed.",
              static_cast<double>(a.store_failures), l);
    x.Counter(p + "l2_load_completed_objects_total", "Objects loaded from the L2 adapter.",
              static_cast<double>(a.loaded_objects), l);
    x.Counter(p + "l2_load_completed_bytes_total", "Bytes loaded from the L2 adapter.",
              static_cast<double>(a.loaded_bytes), l);
    x.Counter(p + "l2_load_misses_total", "Loads of objects the adapter no longer held.",
              static_cast<double>(a.load_misses), l);
    x.Counter(p + "l2_load_failures_total", "Loads the adapter failed.",
              static_cast<double>(a.load_failures), l);
    x.Counter(p + "l2_checksum_failures_total", "Objects that failed their check and were deleted.",
              static_cast<double>(a.checksum_failures), l);
    x.Counter(p + "l2_evicted_objects_total", "Objects the adapter evicted for capacity.",
              static_cast<double>(a.evicted_objects), l);
    x.Gauge(p + "l2_objects", "Objects the adapter holds.", static_cast<double>(a.objects), l);
    x.Gauge(p + "l2_usage_bytes", "Bytes the adapter holds.", static_cast<double>(a.usage_bytes), l);
    x.Gauge(p + "l2_capacity_bytes", "The adapter's capacity (0 = unbounded).",
            static_cast<double>(a.capacity_bytes), l);
    x.Gauge(p + "l2_healthy", "1 unless the adapter is in a failing condition.",
            a.condition.empty() ? 1 : 0, l);
    x.Gauge(p + "l2_in_flight_objects", "Objects in the adapter's calls now, by operation.",
            static_cast<double>(a.storing_objects), {l[0], {"operation", "store"}});
    x.Gauge(p + "l2_in_flight_objects", "", static_cast<double>(a.loading_objects),
            {l[0], {"operation", "load"}});
    x.Gauge(p + "l2_in_flight_objects", "", static_cast<double>(a.looking_up_keys),
            {l[0], {"operation", "lookup"}});
    x.Histogram(p + "l2_call_duration_seconds", "Duration of one call to the adapter, by operation.",
                a.store_latency, {l[0], {"operation", "store"}});
    x.Histogram(p + "l2_call_duration_seconds", "", a.lookup_latency,
                {l[0], {"operation", "lookup"}});
    x.Histogram(p + "l2_call_duration_seconds", "", a.load_latency, {l[0], {"operation", "load"}});
  }
  x.Gauge(p + "l2_store_queue_objects", "Objects waiting to be written to L2.",
          static_cast<double>(l2.store.queued_objects));
  x.Counter(p + "l2_store_submitted_objects_total", "Objects written to every L2 adapter.",
            static_cast<double>(l2.store.stored));
  x.Counter(p + "l2_store_skipped_total", "New objects not written to L2, by reason.",
            static_cast<double>(l2.store.skipped_queue_full), {{"reason", "queue_full"}});
  x.Counter(p + "l2_store_skipped_total", "", static_cast<double>(l2.store.skipped_gone),
            {{"reason", "gone"}});
  x.Counter(p + "l2_store_skipped_total", "", static_cast<double>(l2.store.failed),
            {{"reason", "failed"}});
  x.Gauge(p + "active_prefetch_jobs", "Lookups loading from L2 or waiting to.",
          static_cast<double>(l2.prefetch.in_flight + l2.prefetch.queued));
  x.Counter(p + "l2_prefetch_lookup_total", "Lookups handed to the prefetch controller.",
            static_cast<double>(l2.prefetch.submitted));
  x.Counter(p + "lookup_hit_l2_chunks_total", "Chunks the L2 lookups found after the L1 prefix.",
            static_cast<double>(l2.prefetch.l2_hit_chunks));
  x.Counter(p + "l2_prefetch_loaded_chunks_total", "Chunks loaded from L2 into L1.",
            static_cast<double>(l2.prefetch.loaded_chunks));
  x.Counter(p + "l2_prefetch_failed_chunks_total", "Planned chunks not loaded, by reason.",
            static_cast<double>(l2.prefetch.no_memory_chunks), {{"reason", "l1_oom"}});
  x.Counter(p + "l2_prefetch_failed_chunks_total", "", static_cast<double>(l2.prefetch.load_failed_chunks),
            {{"reason", "load_failed"}});
  x.Counter(p + "l2_prefetch_refused_total",
            "Prefetches answered at once with their L1 hits: the queue for a worker was full.",
            static_cast<double>(l2.prefetch.refused));
  x.Counter(p + "l2_prefetch_deadline_total",
            "Prefetches that reached --l2-prefetch-load-timeout, by outcome.",
            static_cast<double>(l2.prefetch.deadline_expired), {{"outcome", "prefix"}});
  x.Counter(p + "l2_prefetch_deadline_total", "", static_cast<double>(l2.prefetch.abandoned_loads),
            {{"outcome", "abandoned"}});
  x.Gauge(p + "l2_prefetch_abandoned_in_flight",
          "Prefetches answered at their deadline whose adapter call has not returned yet.",
          static_cast<double>(l2.prefetch.abandoned_in_flight));
  x.Histogram(p + "l2_prefetch_duration_seconds", "Time from a lookup's prefetch to its result.",
              l2.prefetch.latency);
}

}  // namespace

std::string RenderPrometheus(const server::StatsSnapshot& s, const HealthVerdict& health,
                             Phase phase) {
  Exposition x;
  const std::string p = P;
  x.Gauge(p + "build_info", "The server's version (always 1).", 1, {{"version", s.version}});
  x.Gauge(p + "uptime_seconds", "Seconds since the server started.", s.uptime_seconds);
  x.Gauge(p + "healthy", "1 when /healthcheck answers 200.", health.healthy ? 1 : 0);
  x.Gauge(p + "draining", "1 while the server drains before it exits.",
          phase == Phase::kDraining ? 1 : 0);
  L1(x, s);
  Requests(x, s);
  if (s.l2) L2(x, *s.l2);
  return x.Take();
}

}  // namespace lmcache::ops
