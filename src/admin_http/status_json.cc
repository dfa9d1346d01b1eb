#include "admin_http/status_json.h"

#include "admin_http/stats_json.h"

namespace lmcache::admin_http {

using nlohmann::json;

namespace {

json P2pPeersJson(const std::vector<server::P2pPeerStatus>& peers) {
  json out = json::array();
  for (const server::P2pPeerStatus& peer : peers) {
    out.push_back({{"url", peer.url},
                   {"state", peer.state},
                   {"reason", peer.reason},
                   {"boot_id", peer.boot_id},
                   {"lives", peer.lives},
                   {"seconds_since_answer", peer.seconds_since_answer},
                   {"rtt_ms", peer.rtt_ms},
                   {"loaded_bytes", peer.loaded_bytes},
                   {"load_batches", peer.load_batches},
                   {"load_failures", peer.load_failures},
                   {"load_gbps", peer.load_gbps},
                   {"chunk_sizes_differ", peer.chunk_sizes_differ}});
  }
  return out;
}

json P2pEtcdJson(const std::vector<server::P2pEtcdStatus>& registrations) {
  json out = json::array();
  for (const server::P2pEtcdStatus& etcd : registrations) {
    out.push_back({{"prefix", etcd.prefix},
                   {"endpoints", etcd.endpoints},
                   {"reachable", etcd.reachable},
                   {"registered", etcd.registered},
                   {"last_error", etcd.last_error},
                   {"peers", etcd.peers}});
  }
  return out;
}

}  // namespace

json StatusJson(const server::ServerStatus& status, const HealthVerdict& verdict, Phase phase,
                int pid) {
  const server::StatsSnapshot& s = status.stats;
  json instances = json::array();
  for (const worker::InstanceInfo& info : status.instances) {
    instances.push_back({{"instance_id", info.instance_id},
                         {"model_name", info.model_name},
                         {"world_size", info.world_size},
                         {"layout",
                          {{"num_layers", info.layout.num_layers},
                           {"hidden_dim", info.layout.hidden_dim},
                           {"chunk_size", info.layout.chunk_size},
                           {"dtype", info.layout.dtype},
                           {"use_mla", info.layout.use_mla},
                           {"shape", info.layout.shape},
                           {"object_bytes", info.layout.object_bytes}}}});
  }
  json l2 = nullptr;
  if (s.l2) {
    json adapters = json::array();
    for (const tier::L2AdapterStats& a : s.l2->adapters) {
      adapters.push_back({{"name", a.name},
                          {"type", a.type},
                          {"description", a.description},
                          {"objects", a.objects},
                          {"usage_bytes", a.usage_bytes},
                          {"capacity_bytes", a.capacity_bytes},
                          {"healthy", a.condition.empty()},
                          {"condition", a.condition}});
    }
    l2 = {{"adapters", adapters},
          {"store_queue_objects", s.l2->store.queued_objects},
          {"prefetches_in_flight", s.l2->prefetch.in_flight},
          {"prefetches_queued", s.l2->prefetch.queued}};
  }
  return {{"version", s.version},
          {"boot_id", s.boot_id},
          {"pid", pid},
          {"uptime_seconds", s.uptime_seconds},
          {"phase", std::string(PhaseName(phase))},
          {"is_healthy", verdict.healthy},
          {"reason", verdict.reason},
          {"pool",
           {{"name", status.pool_name},
            {"size_bytes", s.allocator.capacity_bytes},
            {"prefault",
             {{"ready_bytes", s.prefault.ready_bytes},
              {"total_bytes", s.prefault.total_bytes},
              {"done", s.prefault.done},
              {"seconds", s.prefault.seconds},
              {"huge_page_bytes", s.prefault.huge_page_bytes}}}}},
          {"l1",
           {{"used_bytes", s.allocator.used_bytes},
            {"usage_ratio", s.allocator.UsageRatio()},
            {"resident_objects", s.table.resident_objects},
            {"resident_bytes", s.table.resident_bytes},
            {"staging_bytes", s.table.staging_bytes},
            {"locked_bytes", s.table.locked_bytes},
            {"read_leases", s.table.read_leases}}},
          {"chunk_size", status.chunk_sizes.default_size()},
          {"model_chunk_sizes", status.chunk_sizes.overrides()},
          {"hash_algorithm", "blake3"},
          {"instances", instances},
          {"active_sessions", s.sessions},
          {"active_prefetch_jobs", s.l2 ? s.l2->prefetch.in_flight + s.l2->prefetch.queued : 0},
          {"l2", l2},
          {"p2p",
           {{"enabled", status.p2p.enabled},
            {"advertise_url", status.p2p.advertise_url},
            {"key_fingerprint", status.p2p.key_fingerprint},
            {"serves_unauthenticated", status.p2p.serves_unauthenticated},
            {"served_tasks", s.p2p_served.tasks},
            {"locked_objects", s.p2p_served.locked_objects},
            {"locked_bytes", s.p2p_served.locked_bytes},
            {"peers", P2pPeersJson(status.p2p.peers)},
            {"etcd", P2pEtcdJson(status.p2p.etcd)}}},
          {"stats", StatsJson(s)}};
}


}  // namespace lmcache::admin_http
