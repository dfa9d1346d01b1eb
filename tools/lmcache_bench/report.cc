#include "report.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/system_info.h"

namespace lmcache::bench {
namespace {

// Time per byte of store + retrieve on path `b` over that on path `a` (> 1: `a` is faster).
double RoundTripRatio(double a_store, double a_retrieve, double b_store, double b_retrieve) {
  return (1 / b_store + 1 / b_retrieve) / (1 / a_store + 1 / a_retrieve);
}

// Round r of `a` against round r of `b`.
Spread RoundTripSpread(const PathSamples& a, const PathSamples& b) {
  std::vector<double> ratios;
  for (std::size_t r = 0; r < a.store_gbps.size() && r < b.store_gbps.size(); ++r) {
    ratios.push_back(
        RoundTripRatio(a.store_gbps[r], a.retrieve_gbps[r], b.store_gbps[r], b.retrieve_gbps[r]));
  }
  return SpreadOf(ratios);
}

Spread OverMemcpy(const std::vector<double>& path, const std::vector<double>& memcpy_gbps) {
  std::vector<double> ratios;
  for (std::size_t r = 0; r < path.size() && r < memcpy_gbps.size(); ++r) {
    ratios.push_back(path[r] / memcpy_gbps[r]);
  }
  return SpreadOf(ratios);
}

std::string Number(std::optional<double> value) {
  if (!value) return "null";
  std::ostringstream out;
  out.precision(6);
  out << *value;
  return out.str();
}

std::string Samples(const std::vector<double>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + Number(values[i]);
  return out + "]";
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string Escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string SpreadJson(const Spread& s) {
  return "{\"min\": " + Number(s.min) + ", \"median\": " + Number(s.median) +
         ", \"max\": " + Number(s.max) + "}";
}

std::string PathJson(const PathResults& p) {
  const PathRatios ratios = RatiosOf(p);
  std::ostringstream out;
  out << "{\"tokens_per_prompt\": " << p.tokens_per_prompt
      << ", \"object_bytes\": " << p.object_bytes << ", \"workers\": " << p.workers
      << ", \"memcpy_gbps\": " << Number(Median(p.memcpy_gbps))
      << ", \"store_gbps\": " << Number(Median(p.shm.store_gbps))
      << ", \"retrieve_gbps\": " << Number(Median(p.shm.retrieve_gbps))
      << ", \"socket_store_gbps\": " << Number(Median(p.socket.store_gbps))
      << ", \"socket_retrieve_gbps\": " << Number(Median(p.socket.retrieve_gbps))
      << ", \"store_vs_memcpy\": " << SpreadJson(ratios.store_vs_memcpy)
      << ", \"retrieve_vs_memcpy\": " << SpreadJson(ratios.retrieve_vs_memcpy)
      << ", \"stream_copy_gbps\": " << Number(Median(p.stream_copy_gbps))
      << ", \"store_vs_stream_copy\": " << SpreadJson(ratios.store_vs_stream_copy)
      << ", \"retrieve_vs_stream_copy\": " << SpreadJson(ratios.retrieve_vs_stream_copy)
      << ", \"shm_vs_socket\": " << SpreadJson(ratios.shm_vs_socket) << "}";
  return out.str();
}

// The median, or nothing when the figure was not measured.
std::optional<double> Figure(const std::vector<double>& samples);

// The median of one chunk size's per-token costs (kPhaseChunkSizes[index]).
std::optional<double> ChunkFigure(const BenchReport& r,
                                  std::vector<std::vector<double>> ChunkSizeFigures::*costs,
                                  std::size_t index) {
  if (!r.chunk_sizes) return std::nullopt;
  return Figure(((*r.chunk_sizes).*costs)[index]);
}

std::optional<double> Figure(const std::vector<double>& samples) {
  if (samples.empty()) return std::nullopt;
  return Median(samples);
}

std::optional<double> MedianOr(const std::optional<PathSamples>& p, bool store) {
  if (!p) return std::nullopt;
  return Figure(store ? p->store_gbps : p->retrieve_gbps);
}

std::optional<double> RatioOr(const Spread& s, bool measured) {
  if (!measured) return std::nullopt;
  return s.median;
}

// A figure of the restart phase's largest pool; nullopt when not measured.
std::optional<double> LargestRestart(const BenchReport& r, double RestartSample::*field) {
  if (!r.restart || r.restart->empty()) return std::nullopt;
  const RestartSample* largest = &r.restart->front();
  for (const RestartSample& s : *r.restart) {
    if (s.pool_gb > largest->pool_gb) largest = &s;
  }
  return largest->*field;
}

// The smallest fraction of its objects a successor served (`field`: after the
// takeover or after the crash), over the pools.
std::optional<double> LeastServed(const BenchReport& r, double RestartSample::*field) {
  if (!r.restart || r.restart->empty()) return std::nullopt;
  double least = 1;
  for (const RestartSample& s : *r.restart) least = std::min(least, s.*field);
  return least;
}

}  // namespace

// Round r of `path` over round r of `reference`.
Spread PerRound(const std::vector<double>& path, const std::vector<double>& reference) {
  return OverMemcpy(path, reference);
}

PathRatios RatiosOf(const PathResults& p) {
  PathRatios r;
  r.store_vs_memcpy = OverMemcpy(p.shm.store_gbps, p.memcpy_gbps);
  r.retrieve_vs_memcpy = OverMemcpy(p.shm.retrieve_gbps, p.memcpy_gbps);
  r.store_vs_stream_copy = OverMemcpy(p.shm.store_gbps, p.stream_copy_gbps);
  r.retrieve_vs_stream_copy = OverMemcpy(p.shm.retrieve_gbps, p.stream_copy_gbps);
  r.shm_vs_socket = RoundTripSpread(p.shm, p.socket);
  if (p.redis) r.shm_vs_redis = RoundTripSpread(p.shm, *p.redis);
  return r;
}

// The p2p load over `reference`, per round (the median), when measured.
std::optional<double> P2pRatio(const BenchReport& r, std::vector<double> P2pFigures::*reference) {
  if (!r.p2p) return std::nullopt;
  return PerRound(r.p2p->load_gbps, (*r.p2p).*reference).median;
}

std::string P2pSpreadJson(const BenchReport& r, std::vector<double> P2pFigures::*reference) {
  return r.p2p ? SpreadJson(PerRound(r.p2p->load_gbps, (*r.p2p).*reference)) : "null";
}

std::vector<std::pair<std::string, std::optional<double>>> HeadlineFields(const BenchReport& r) {
  const PathResults& m = r.main;
  const Latencies& l = r.latencies;
  const PathRatios ratios = RatiosOf(m);
  const bool measured = !m.memcpy_gbps.empty();
  std::optional<double> shm_vs_redis;
  if (ratios.shm_vs_redis && measured) shm_vs_redis = ratios.shm_vs_redis->median;
  return {
      {"memcpy_gbps", Figure(m.memcpy_gbps)},
      {"store_gbps", Figure(m.shm.store_gbps)},
      {"retrieve_gbps", Figure(m.shm.retrieve_gbps)},
      {"socket_store_gbps", Figure(m.socket.store_gbps)},
      {"socket_retrieve_gbps", Figure(m.socket.retrieve_gbps)},
      {"redis_store_gbps", MedianOr(m.redis, true)},
      {"redis_retrieve_gbps", MedianOr(m.redis, false)},
      {"ping_p50_us", l.ping_p50_us},
      {"zmq_echo_p50_us", l.zmq_echo_p50_us},
      {"lookup_p50_us", l.lookup_p50_us},
      {"lookup_server_us", l.lookup_stages.server_us},
      {"lookup_decode_us", l.lookup_stages.decode_us},
      {"lookup_hash_us", l.lookup_stages.hash_us},
      {"lookup_lock_us", l.lookup_stages.lock_us},
      {"store_vs_memcpy", RatioOr(ratios.store_vs_memcpy, measured)},
      {"retrieve_vs_memcpy", RatioOr(ratios.retrieve_vs_memcpy, measured)},
      {"shm_vs_socket", RatioOr(ratios.shm_vs_socket, measured)},
      {"shm_vs_redis", shm_vs_redis},
      {"ping_vs_echo", l.ping_vs_echo.median},
      {"lookup_cold_p50_us", r.lookup_cold_p50_us},
      {"shared_prefix_lookup_p50_us", l.shared_prefix_lookup_p50_us},
      {"shared_prefix_hit_fraction", l.shared_prefix_hit_fraction},
      {"l2_store_gbps", r.l2 ? Figure(r.l2->store_gbps) : std::nullopt},
      {"l2_load_gbps", r.l2 ? Figure(r.l2->load_gbps) : std::nullopt},
      {"disk_write_gbps", r.l2 ? Figure(r.l2->reference_write_gbps) : std::nullopt},
      {"disk_read_gbps", r.l2 ? Figure(r.l2->reference_read_gbps) : std::nullopt},
      {"l2_store_vs_disk",
       r.l2 ? std::optional(PerRound(r.l2->store_gbps, r.l2->reference_write_gbps).median)
            : std::nullopt},
      {"l2_load_vs_disk",
       r.l2 ? std::optional(PerRound(r.l2->load_gbps, r.l2->reference_read_gbps).median)
            : std::nullopt},
      {"l2_index_rebuild_seconds", r.l2 ? std::optional(r.l2->rebuild_seconds) : std::nullopt},
      {"l2_index_rebuild_objects",
       r.l2 ? std::optional(static_cast<double>(r.l2->rebuild_objects)) : std::nullopt},
      {"resp_store_gbps", r.resp ? Figure(r.resp->store_gbps) : std::nullopt},
      {"resp_load_gbps", r.resp ? Figure(r.resp->load_gbps) : std::nullopt},
      {"raw_redis_set_gbps", r.resp ? Figure(r.resp->reference_write_gbps) : std::nullopt},
      {"raw_redis_get_gbps", r.resp ? Figure(r.resp->reference_read_gbps) : std::nullopt},
      {"resp_store_vs_raw",
       r.resp ? std::optional(PerRound(r.resp->store_gbps, r.resp->reference_write_gbps).median)
              : std::nullopt},
      {"resp_load_vs_raw",
       r.resp ? std::optional(PerRound(r.resp->load_gbps, r.resp->reference_read_gbps).median)
              : std::nullopt},
      {"cross_node_gbps", r.resp ? Figure(r.resp->cross_node_gbps) : std::nullopt},
      {"s3_store_gbps", r.s3 ? Figure(r.s3->store_gbps) : std::nullopt},
      {"s3_load_gbps", r.s3 ? Figure(r.s3->load_gbps) : std::nullopt},
      {"raw_s3_put_gbps", r.s3 ? Figure(r.s3->reference_write_gbps) : std::nullopt},
      {"raw_s3_get_gbps", r.s3 ? Figure(r.s3->reference_read_gbps) : std::nullopt},
      {"s3_store_vs_raw",
       r.s3 ? std::optional(PerRound(r.s3->store_gbps, r.s3->reference_write_gbps).median)
            : std::nullopt},
      {"s3_load_vs_raw",
       r.s3 ? std::optional(PerRound(r.s3->load_gbps, r.s3->reference_read_gbps).median)
            : std::nullopt},
      {"s3_cross_node_gbps", r.s3 ? Figure(r.s3->cross_node_gbps) : std::nullopt},
      {"store_faults_per_mib", Figure(m.shm.store_faults_per_mib)},
      {"retrieve_faults_per_mib", Figure(m.shm.retrieve_faults_per_mib)},
      {"stream_copy_gbps", Figure(m.stream_copy_gbps)},
      {"store_vs_stream_copy", RatioOr(ratios.store_vs_stream_copy, measured)},
      {"retrieve_vs_stream_copy", RatioOr(ratios.retrieve_vs_stream_copy, measured)},
      {"events_off_store_gbps", r.events ? Figure(r.events->off_store_gbps) : std::nullopt},
      {"events_on_store_gbps", r.events ? Figure(r.events->on_store_gbps) : std::nullopt},
      {"events_on_vs_off",
       r.events ? std::optional(PerRound(r.events->on_store_gbps, r.events->off_store_gbps).median)
                : std::nullopt},
      {"events_small_on_vs_off",
       r.events
           ? std::optional(
                 PerRound(r.events->small_on_store_gbps, r.events->small_off_store_gbps).median)
           : std::nullopt},
      {"journal_on_vs_off",
       r.journal
           ? std::optional(PerRound(r.journal->on_store_gbps, r.journal->off_store_gbps).median)
           : std::nullopt},
      {"journal_small_on_vs_off",
       r.journal
           ? std::optional(
                 PerRound(r.journal->small_on_store_gbps, r.journal->small_off_store_gbps).median)
           : std::nullopt},
      {"quota_on_vs_off",
       r.quota ? std::optional(PerRound(r.quota->on_store_gbps, r.quota->off_store_gbps).median)
               : std::nullopt},
      {"quota_small_on_vs_off",
       r.quota ? std::optional(
                     PerRound(r.quota->small_on_store_gbps, r.quota->small_off_store_gbps).median)
               : std::nullopt},
      {"restart_serve_seconds", LargestRestart(r, &RestartSample::serve_seconds)},
      {"restart_takeover_seconds", LargestRestart(r, &RestartSample::takeover_seconds)},
      {"restart_served_fraction", LeastServed(r, &RestartSample::served_fraction)},
      {"recovery_serve_seconds", LargestRestart(r, &RestartSample::recovery_serve_seconds)},
      {"recovery_seconds", LargestRestart(r, &RestartSample::recovery_seconds)},
      {"recovered_fraction", LeastServed(r, &RestartSample::recovered_fraction)},
      {"p2p_load_gbps", r.p2p ? Figure(r.p2p->load_gbps) : std::nullopt},
      {"p2p_ucp_get_gbps", r.p2p ? Figure(r.p2p->ucp_get_gbps) : std::nullopt},
      {"p2p_ucp_am_bw_gbps", r.p2p ? Figure(r.p2p->ucp_am_bw_gbps) : std::nullopt},
      {"p2p_redis_load_gbps", r.p2p ? Figure(r.p2p->redis_load_gbps) : std::nullopt},
      {"p2p_unverified_load_gbps", r.p2p ? Figure(r.p2p->unverified_load_gbps) : std::nullopt},
      {"p2p_verified_vs_unverified", P2pRatio(r, &P2pFigures::unverified_load_gbps)},
      {"p2p_vs_ucp_get", P2pRatio(r, &P2pFigures::ucp_get_gbps)},
      {"p2p_vs_ucp_am_bw", P2pRatio(r, &P2pFigures::ucp_am_bw_gbps)},
      {"p2p_vs_redis", P2pRatio(r, &P2pFigures::redis_load_gbps)},
      {"p2p_owner_cpu_s_per_gb", r.p2p ? Figure(r.p2p->owner_cpu_s_per_gb) : std::nullopt},
      {"ttr_peer_ms", r.p2p ? Figure(r.p2p->ttr_peer_ms) : std::nullopt},
      {"ttr_l1_ms", r.p2p ? Figure(r.p2p->ttr_l1_ms) : std::nullopt},
      {"ttr_fs_ms", r.p2p ? Figure(r.p2p->ttr_fs_ms) : std::nullopt},
      {"chunk1_store_ns_per_token", ChunkFigure(r, &ChunkSizeFigures::store_ns_per_token, 0)},
      {"chunk256_store_ns_per_token", ChunkFigure(r, &ChunkSizeFigures::store_ns_per_token, 2)},
      {"chunk1_lookup_ns_per_token", ChunkFigure(r, &ChunkSizeFigures::lookup_ns_per_token, 0)},
      {"chunk256_lookup_ns_per_token", ChunkFigure(r, &ChunkSizeFigures::lookup_ns_per_token, 2)},
      {"chunk1_store_vs_256",
       r.chunk_sizes ? Figure(r.chunk_sizes->store_1_vs_256()) : std::nullopt},
      {"chunk1_lookup_vs_256",
       r.chunk_sizes ? Figure(r.chunk_sizes->lookup_1_vs_256()) : std::nullopt},
  };
}

void PrintTable(const BenchReport& r) {
  const BenchOptions& o = r.options;
  std::printf(
      "\nlmcache-bench: %d workers, %llu-token prompts, %llu bytes/token, %llu-token chunks "
      "(%.1f MiB each), %d prompts/worker, %d interleaved rounds\n\n",
      o.workers, static_cast<unsigned long long>(o.tokens_per_prompt),
      static_cast<unsigned long long>(o.bytes_per_token),
      static_cast<unsigned long long>(o.chunk_size),
      static_cast<double>(o.object_bytes()) / (1 << 20), o.prompts_per_worker, o.rounds);
  std::printf("  %-22s %14s %14s   (median GB/s)\n", "path", "store", "retrieve");
  auto row = [](const char* name, const PathSamples& p) {
    std::printf("  %-22s %14.2f %14.2f\n", name, Median(p.store_gbps), Median(p.retrieve_gbps));
  };
  const double memcpy_gbps = Median(r.main.memcpy_gbps);
  std::printf("  %-22s %14.2f %14.2f\n", "memcpy (reference)", memcpy_gbps, memcpy_gbps);
  const double stream_gbps = Median(r.main.stream_copy_gbps);
  std::printf("  %-22s %14.2f %14.2f\n", "StreamCopy (reference)", stream_gbps, stream_gbps);
  row("lmcache shm (RPCs)", r.main.shm);
  row("copy through socket", r.main.socket);
  if (r.main.redis) {
    row("redis (hiredis)", *r.main.redis);
  } else {
    std::printf("  %-22s %14s %14s\n", "redis (hiredis)", "skipped", "skipped");
  }
  std::printf("\n");
  for (const auto& [name, value] : HeadlineFields(r)) {
    if (value) {
      std::printf("  %-28s %12.3f\n", name.c_str(), *value);
    } else {
      std::printf("  %-28s %12s\n", name.c_str(), "n/a");
    }
  }
  const PathRatios ratios = RatiosOf(r.main);
  auto spread = [](const char* name, const Spread& s) {
    std::printf("  %-22s min %.3f  median %.3f  max %.3f\n", name, s.min, s.median, s.max);
  };
  std::printf("\n  per-round ratios:\n");
  spread("store_vs_memcpy", ratios.store_vs_memcpy);
  spread("retrieve_vs_memcpy", ratios.retrieve_vs_memcpy);
  spread("store_vs_stream_copy", ratios.store_vs_stream_copy);
  spread("retrieve_vs_stream_copy", ratios.retrieve_vs_stream_copy);
  spread("shm_vs_socket", ratios.shm_vs_socket);
  if (ratios.shm_vs_redis) spread("shm_vs_redis", *ratios.shm_vs_redis);
  spread("ping_vs_echo", r.latencies.ping_vs_echo);
  if (r.l2) {
    spread("l2_store_vs_disk", PerRound(r.l2->store_gbps, r.l2->reference_write_gbps));
    spread("l2_load_vs_disk", PerRound(r.l2->load_gbps, r.l2->reference_read_gbps));
  }
  if (r.resp) {
    spread("resp_store_vs_raw", PerRound(r.resp->store_gbps, r.resp->reference_write_gbps));
    spread("resp_load_vs_raw", PerRound(r.resp->load_gbps, r.resp->reference_read_gbps));
  }
  if (r.s3) {
    spread("s3_store_vs_raw", PerRound(r.s3->store_gbps, r.s3->reference_write_gbps));
    spread("s3_load_vs_raw", PerRound(r.s3->load_gbps, r.s3->reference_read_gbps));
  }
  if (r.restart) {
    for (const RestartSample& s : *r.restart) {
      std::printf("  warm restart, %.0f GiB pool (%llu objects): successor serving %.3f s after "
                  "its start (its takeover %.3f s), %.4f of the objects served\n",
                  s.pool_gb, static_cast<unsigned long long>(s.objects), s.serve_seconds,
                  s.takeover_seconds, s.served_fraction);
      std::printf("  crash recovery, %.0f GiB pool: after kill -9, the next server serving %.3f s "
                  "after its start (its recovery %.3f s), %.4f of the objects served (B's "
                  "journal still checksumming what it adopted for %.3f s after its lookups)\n",
                  s.pool_gb, s.recovery_serve_seconds, s.recovery_seconds, s.recovered_fraction,
                  s.reseal_seconds);
    }
  }
  if (r.events) {
    std::printf("  KV events off / on: store %.2f / %.2f GB/s\n", Median(r.events->off_store_gbps),
                Median(r.events->on_store_gbps));
    spread("events_on_vs_off", PerRound(r.events->on_store_gbps, r.events->off_store_gbps));
    spread("events_small_on_vs_off",
           PerRound(r.events->small_on_store_gbps, r.events->small_off_store_gbps));
  }
  if (r.quota) {
    std::printf("  quota accounting off / on: store %.2f / %.2f GB/s\n",
                Median(r.quota->off_store_gbps), Median(r.quota->on_store_gbps));
    spread("quota_on_vs_off", PerRound(r.quota->on_store_gbps, r.quota->off_store_gbps));
    spread("quota_small_on_vs_off",
           PerRound(r.quota->small_on_store_gbps, r.quota->small_off_store_gbps));
  }
  if (r.journal) {
    std::printf("  crash-recovery journal off / on: store %.2f / %.2f GB/s\n",
                Median(r.journal->off_store_gbps), Median(r.journal->on_store_gbps));
    spread("journal_on_vs_off", PerRound(r.journal->on_store_gbps, r.journal->off_store_gbps));
    spread("journal_small_on_vs_off",
           PerRound(r.journal->small_on_store_gbps, r.journal->small_off_store_gbps));
  }
  if (r.p2p) {
    const P2pFigures& p = *r.p2p;
    std::printf("  p2p, %llu tokens in %.0f MiB chunks from a peer: %.2f GB/s (ucp_get %.2f, "
                "ucp_am_bw %.2f, through Redis %.2f); owner %.2f CPU s/GB\n",
                static_cast<unsigned long long>(p.prompt_tokens),
                static_cast<double>(p.object_bytes) / (1 << 20), Median(p.load_gbps),
                Median(p.ucp_get_gbps), Median(p.ucp_am_bw_gbps), Median(p.redis_load_gbps),
                Median(p.owner_cpu_s_per_gb));
    spread("p2p_vs_ucp_get", PerRound(p.load_gbps, p.ucp_get_gbps));
    spread("p2p_vs_ucp_am_bw", PerRound(p.load_gbps, p.ucp_am_bw_gbps));
    spread("p2p_vs_redis", PerRound(p.load_gbps, p.redis_load_gbps));
    spread("p2p_verified_vs_unverified", PerRound(p.load_gbps, p.unverified_load_gbps));
    std::printf("  lookup to retrievable, %llu tokens: from a peer %.1f ms, local L1 %.1f ms, "
                "fs L2 %.1f ms\n",
                static_cast<unsigned long long>(p.ttr_tokens), Median(p.ttr_peer_ms),
                Median(p.ttr_l1_ms), Median(p.ttr_fs_ms));
  }
  if (r.chunk_sizes) {
    std::printf("  per token, %llu-token prompts (ns, medians): chunk size / store / lookup\n",
                static_cast<unsigned long long>(r.chunk_sizes->tokens));
    for (std::size_t i = 0; i < std::size(kPhaseChunkSizes); ++i) {
      std::printf("    %6llu  %10.1f  %10.1f\n",
                  static_cast<unsigned long long>(kPhaseChunkSizes[i]),
                  Median(r.chunk_sizes->store_ns_per_token[i]),
                  Median(r.chunk_sizes->lookup_ns_per_token[i]));
    }
    spread("chunk1_store_vs_256", SpreadOf(r.chunk_sizes->store_1_vs_256()));
    spread("chunk1_lookup_vs_256", SpreadOf(r.chunk_sizes->lookup_1_vs_256()));
  }
  for (const auto& [phase, reason] : r.skipped) {
    std::printf("  %s phase skipped: %s\n", phase.c_str(), reason.c_str());
  }
  for (const PathResults& p : r.sweep) {
    const PathRatios pr = RatiosOf(p);
    std::printf(
        "  sweep %5.1f MiB chunks, %d workers: memcpy %.2f | shm %.2f / %.2f GB/s | "
        "vs memcpy %.2f [%.2f-%.2f] / %.2f [%.2f-%.2f] | vs socket %.1f\n",
        static_cast<double>(p.object_bytes) / (1 << 20), p.workers, Median(p.memcpy_gbps),
        Median(p.shm.store_gbps), Median(p.shm.retrieve_gbps), pr.store_vs_memcpy.median,
        pr.store_vs_memcpy.min, pr.store_vs_memcpy.max, pr.retrieve_vs_memcpy.median,
        pr.retrieve_vs_memcpy.min, pr.retrieve_vs_memcpy.max, pr.shm_vs_socket.median);
  }
  std::fflush(stdout);
}

Status WriteJson(const BenchReport& r, const std::string& path) {
  const BenchOptions& o = r.options;
  std::ostringstream out;
  out << "{\n  \"schema\": \"lmcache-bench/2\",\n";
  out << "  \"machine\": {\"cpu\": \"" << Escape(CpuModel())
      << "\", \"cores\": " << std::thread::hardware_concurrency()
      << ", \"memory_bytes\": " << PhysicalMemoryBytes() << ", \"server_version\": \""
      << Escape(r.server_version) << "\"},\n";
  out << "  \"parameters\": {\"workers\": " << o.workers
      << ", \"tokens_per_prompt\": " << o.tokens_per_prompt
      << ", \"bytes_per_token\": " << o.bytes_per_token << ", \"chunk_size\": " << o.chunk_size
      << ", \"prompts_per_worker\": " << o.prompts_per_worker << ", \"rounds\": " << o.rounds
      << ", \"pool_gb\": " << o.pool_gb << ", \"lookup_tokens\": " << o.lookup_tokens
      << ", \"quick\": " << (o.quick ? "true" : "false")
      << ", \"p2p_tokens\": " << (r.p2p ? r.p2p->prompt_tokens : 0)
      << ", \"p2p_object_bytes\": " << (r.p2p ? r.p2p->object_bytes : 0)
      << ", \"p2p_ttr_tokens\": " << (r.p2p ? r.p2p->ttr_tokens : 0) << "},\n";
  out << "  \"skipped\": {";
  for (std::size_t i = 0; i < r.skipped.size(); ++i) {
    out << (i ? ", " : "") << "\"" << Escape(r.skipped[i].first) << "\": \""
        << Escape(r.skipped[i].second) << "\"";
  }
  out << "},\n";
  out << "  \"results\": {\n";
  const auto fields = HeadlineFields(r);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    out << "    \"" << fields[i].first << "\": " << Number(fields[i].second)
        << (i + 1 < fields.size() ? ",\n" : "\n");
  }
  out << "  },\n";
  const PathRatios ratios = RatiosOf(r.main);
  out << "  \"spread\": {\"store_vs_memcpy\": " << SpreadJson(ratios.store_vs_memcpy)
      << ", \"retrieve_vs_memcpy\": " << SpreadJson(ratios.retrieve_vs_memcpy)
      << ", \"store_vs_stream_copy\": " << SpreadJson(ratios.store_vs_stream_copy)
      << ", \"retrieve_vs_stream_copy\": " << SpreadJson(ratios.retrieve_vs_stream_copy)
      << ", \"shm_vs_socket\": " << SpreadJson(ratios.shm_vs_socket)
      << ", \"shm_vs_redis\": " << (ratios.shm_vs_redis ? SpreadJson(*ratios.shm_vs_redis) : "null")
      << ", \"ping_vs_echo\": " << SpreadJson(r.latencies.ping_vs_echo)
      << ", \"l2_store_vs_disk\": "
      << (r.l2 ? SpreadJson(PerRound(r.l2->store_gbps, r.l2->reference_write_gbps)) : "null")
      << ", \"l2_load_vs_disk\": "
      << (r.l2 ? SpreadJson(PerRound(r.l2->load_gbps, r.l2->reference_read_gbps)) : "null")
      << ", \"resp_store_vs_raw\": "
      << (r.resp ? SpreadJson(PerRound(r.resp->store_gbps, r.resp->reference_write_gbps)) : "null")
      << ", \"resp_load_vs_raw\": "
      << (r.resp ? SpreadJson(PerRound(r.resp->load_gbps, r.resp->reference_read_gbps)) : "null")
      << ", \"s3_store_vs_raw\": "
      << (r.s3 ? SpreadJson(PerRound(r.s3->store_gbps, r.s3->reference_write_gbps)) : "null")
      << ", \"s3_load_vs_raw\": "
      << (r.s3 ? SpreadJson(PerRound(r.s3->load_gbps, r.s3->reference_read_gbps)) : "null")
      << ", \"events_on_vs_off\": "
      << (r.events ? SpreadJson(PerRound(r.events->on_store_gbps, r.events->off_store_gbps))
                   : "null")
      << ", \"events_small_on_vs_off\": "
      << (r.events
              ? SpreadJson(PerRound(r.events->small_on_store_gbps, r.events->small_off_store_gbps))
              : "null")
      << ", \"journal_on_vs_off\": "
      << (r.journal ? SpreadJson(PerRound(r.journal->on_store_gbps, r.journal->off_store_gbps))
                    : "null")
      << ", \"journal_small_on_vs_off\": "
      << (r.journal ? SpreadJson(
                          PerRound(r.journal->small_on_store_gbps, r.journal->small_off_store_gbps))
                    : "null")
      << ", \"quota_on_vs_off\": "
      << (r.quota ? SpreadJson(PerRound(r.quota->on_store_gbps, r.quota->off_store_gbps)) : "null")
      << ", \"quota_small_on_vs_off\": "
      << (r.quota
              ? SpreadJson(PerRound(r.quota->small_on_store_gbps, r.quota->small_off_store_gbps))
              : "null")
      << ", \"p2p_vs_ucp_get\": " << P2pSpreadJson(r, &P2pFigures::ucp_get_gbps)
      << ", \"p2p_vs_ucp_am_bw\": " << P2pSpreadJson(r, &P2pFigures::ucp_am_bw_gbps)
      << ", \"p2p_vs_redis\": " << P2pSpreadJson(r, &P2pFigures::redis_load_gbps)
      << ", \"p2p_verified_vs_unverified\": " << P2pSpreadJson(r, &P2pFigures::unverified_load_gbps)
      << ", \"chunk1_store_vs_256\": "
      << (r.chunk_sizes ? SpreadJson(SpreadOf(r.chunk_sizes->store_1_vs_256())) : "null")
      << ", \"chunk1_lookup_vs_256\": "
      << (r.chunk_sizes ? SpreadJson(SpreadOf(r.chunk_sizes->lookup_1_vs_256())) : "null")
      << "},\n";
  out << "  \"samples\": {\"memcpy_gbps\": " << Samples(r.main.memcpy_gbps)
      << ", \"stream_copy_gbps\": " << Samples(r.main.stream_copy_gbps)
      << ", \"store_gbps\": " << Samples(r.main.shm.store_gbps)
      << ", \"retrieve_gbps\": " << Samples(r.main.shm.retrieve_gbps)
      << ", \"socket_store_gbps\": " << Samples(r.main.socket.store_gbps)
      << ", \"socket_retrieve_gbps\": " << Samples(r.main.socket.retrieve_gbps)
      << ", \"store_faults_per_mib\": " << Samples(r.main.shm.store_faults_per_mib)
      << ", \"retrieve_faults_per_mib\": " << Samples(r.main.shm.retrieve_faults_per_mib);
  if (r.events) {
    out << ", \"events_off_store_gbps\": " << Samples(r.events->off_store_gbps)
        << ", \"events_on_store_gbps\": " << Samples(r.events->on_store_gbps)
        << ", \"events_small_off_store_gbps\": " << Samples(r.events->small_off_store_gbps)
        << ", \"events_small_on_store_gbps\": " << Samples(r.events->small_on_store_gbps);
  }
  if (r.journal) {
    out << ", \"journal_off_store_gbps\": " << Samples(r.journal->off_store_gbps)
        << ", \"journal_on_store_gbps\": " << Samples(r.journal->on_store_gbps)
        << ", \"journal_small_off_store_gbps\": " << Samples(r.journal->small_off_store_gbps)
        << ", \"journal_small_on_store_gbps\": " << Samples(r.journal->small_on_store_gbps);
  }
  if (r.quota) {
    out << ", \"quota_off_store_gbps\": " << Samples(r.quota->off_store_gbps)
        << ", \"quota_on_store_gbps\": " << Samples(r.quota->on_store_gbps)
        << ", \"quota_small_off_store_gbps\": " << Samples(r.quota->small_off_store_gbps)
        << ", \"quota_small_on_store_gbps\": " << Samples(r.quota->small_on_store_gbps);
  }
  if (r.p2p) {
    out << ", \"p2p_load_gbps\": " << Samples(r.p2p->load_gbps)
        << ", \"p2p_ucp_get_gbps\": " << Samples(r.p2p->ucp_get_gbps)
        << ", \"p2p_ucp_am_bw_gbps\": " << Samples(r.p2p->ucp_am_bw_gbps)
        << ", \"p2p_redis_load_gbps\": " << Samples(r.p2p->redis_load_gbps)
        << ", \"p2p_owner_cpu_s_per_gb\": " << Samples(r.p2p->owner_cpu_s_per_gb)
        << ", \"ttr_peer_ms\": " << Samples(r.p2p->ttr_peer_ms)
        << ", \"ttr_l1_ms\": " << Samples(r.p2p->ttr_l1_ms)
        << ", \"ttr_fs_ms\": " << Samples(r.p2p->ttr_fs_ms);
  }
  if (r.chunk_sizes) {
    for (std::size_t i = 0; i < std::size(kPhaseChunkSizes); ++i) {
      const std::string size = std::to_string(kPhaseChunkSizes[i]);
      out << ", \"chunk" << size
          << "_store_ns_per_token\": " << Samples(r.chunk_sizes->store_ns_per_token[i])
          << ", \"chunk" << size
          << "_lookup_ns_per_token\": " << Samples(r.chunk_sizes->lookup_ns_per_token[i]);
    }
  }
  out << "},\n";
  out << "  \"restart\": [";
  if (r.restart) {
    for (std::size_t i = 0; i < r.restart->size(); ++i) {
      const RestartSample& s = (*r.restart)[i];
      out << (i ? ", " : "") << "{\"pool_gb\": " << s.pool_gb << ", \"objects\": " << s.objects
          << ", \"fill_seconds\": " << s.fill_seconds << ", \"serve_seconds\": "
          << s.serve_seconds << ", \"takeover_seconds\": " << s.takeover_seconds
          << ", \"adopted_objects\": " << s.adopted_objects
          << ", \"served_fraction\": " << s.served_fraction
          << ", \"reseal_seconds\": " << s.reseal_seconds
          << ", \"recovery_serve_seconds\": " << s.recovery_serve_seconds
          << ", \"recovery_seconds\": " << s.recovery_seconds
          << ", \"recovered_fraction\": " << s.recovered_fraction << "}";
    }
  }
  out << "],\n";
  out << "  \"sweep\": [";
  for (std::size_t i = 0; i < r.sweep.size(); ++i) {
    out << (i ? ",\n    " : "\n    ") << PathJson(r.sweep[i]);
  }
  out << (r.sweep.empty() ? "]\n}\n" : "\n  ]\n}\n");
  std::ofstream file(path);
  file << out.str();
  if (!file) return Status(ErrorCode::kIoError, "cannot write " + path);
  return Status::Ok();
}

}  // namespace lmcache::bench
