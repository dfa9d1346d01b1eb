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
double RoundTripRatio(const Throughput& a, const Throughput& b) {
  const double a_time = 1 / a.store_gbps + 1 / a.retrieve_gbps;
  const double b_time = 1 / b.store_gbps + 1 / b.retrieve_gbps;
  return b_time / a_time;
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

std::string PathJson(const PathResults& p) {
  std::ostringstream out;
  out << "{\"tokens_per_prompt\": " << p.tokens_per_prompt
      << ", \"memcpy_gbps\": " << Number(p.memcpy_gbps)
      << ", \"store_gbps\": " << Number(p.shm.store_gbps)
      << ", \"retrieve_gbps\": " << Number(p.shm.retrieve_gbps)
      << ", \"socket_store_gbps\": " << Number(p.socket.store_gbps)
      << ", \"socket_retrieve_gbps\": " << Number(p.socket.retrieve_gbps)
      << ", \"redis_store_gbps\": "
      << Number(p.redis ? std::optional(p.redis->store_gbps) : std::nullopt)
      << ", \"redis_retrieve_gbps\": "
      << Number(p.redis ? std::optional(p.redis->retrieve_gbps) : std::nullopt) << "}";
  return out.str();
}

}  // namespace

std::vector<std::pair<std::string, std::optional<double>>> HeadlineFields(const BenchReport& r) {
  const PathResults& m = r.main;
  const Latencies& l = r.latencies;
  std::optional<double> redis_store, redis_retrieve, shm_vs_redis;
  if (m.redis) {
    redis_store = m.redis->store_gbps;
    redis_retrieve = m.redis->retrieve_gbps;
    shm_vs_redis = RoundTripRatio(m.shm, *m.redis);
  }
  return {
      {"memcpy_gbps", m.memcpy_gbps},
      {"store_gbps", m.shm.store_gbps},
      {"retrieve_gbps", m.shm.retrieve_gbps},
      {"socket_store_gbps", m.socket.store_gbps},
      {"socket_retrieve_gbps", m.socket.retrieve_gbps},
      {"redis_store_gbps", redis_store},
      {"redis_retrieve_gbps", redis_retrieve},
      {"ping_p50_us", l.ping_p50_us},
      {"zmq_echo_p50_us", l.zmq_echo_p50_us},
      {"lookup_p50_us", l.lookup_p50_us},
      {"store_vs_memcpy", m.shm.store_gbps / m.memcpy_gbps},
      {"retrieve_vs_memcpy", m.shm.retrieve_gbps / m.memcpy_gbps},
      {"shm_vs_socket", RoundTripRatio(m.shm, m.socket)},
      {"shm_vs_redis", shm_vs_redis},
      {"ping_vs_echo", l.ping_p50_us / l.zmq_echo_p50_us},
  };
}

void PrintTable(const BenchReport& r) {
  const BenchOptions& o = r.options;
  std::printf(
      "\nlmcache-bench: %d workers, %llu-token prompts, %llu bytes/token, %llu-token chunks "
      "(%.1f MiB each), %d prompts/worker, median of %d rounds\n\n",
      o.workers, static_cast<unsigned long long>(o.tokens_per_prompt),
      static_cast<unsigned long long>(o.bytes_per_token),
      static_cast<unsigned long long>(o.chunk_size),
      static_cast<double>(o.object_bytes()) / (1 << 20), o.prompts_per_worker, o.rounds);
  std::printf("  %-22s %14s %14s\n", "path", "store GB/s", "retrieve GB/s");
  auto row = [](const char* name, double store, double retrieve) {
    std::printf("  %-22s %14.2f %14.2f\n", name, store, retrieve);
  };
  row("memcpy (reference)", r.main.memcpy_gbps, r.main.memcpy_gbps);
  row("lmcache shm (RPCs)", r.main.shm.store_gbps, r.main.shm.retrieve_gbps);
  row("copy through socket", r.main.socket.store_gbps, r.main.socket.retrieve_gbps);
  if (r.main.redis) {
    row("redis (hiredis)", r.main.redis->store_gbps, r.main.redis->retrieve_gbps);
  } else {
    std::printf("  %-22s %14s %14s\n", "redis (hiredis)", "skipped", "skipped");
  }
  std::printf("\n");
  for (const auto& [name, value] : HeadlineFields(r)) {
    if (value) {
      std::printf("  %-22s %12.3f\n", name.c_str(), *value);
    } else {
      std::printf("  %-22s %12s\n", name.c_str(), "n/a");
    }
  }
  for (const PathResults& p : r.sweep) {
    std::printf("  sweep %7llu tokens: memcpy %.2f | shm %.2f / %.2f | socket %.2f / %.2f GB/s\n",
                static_cast<unsigned long long>(p.tokens_per_prompt), p.memcpy_gbps,
                p.shm.store_gbps, p.shm.retrieve_gbps, p.socket.store_gbps, p.socket.retrieve_gbps);
  }
  std::fflush(stdout);
}

Status WriteJson(const BenchReport& r, const std::string& path) {
  const BenchOptions& o = r.options;
  std::ostringstream out;
  out << "{\n  \"schema\": \"lmcache-bench/1\",\n";
  out << "  \"machine\": {\"cpu\": \"" << Escape(CpuModel())
      << "\", \"cores\": " << std::thread::hardware_concurrency()
      << ", \"memory_bytes\": " << PhysicalMemoryBytes() << ", \"server_version\": \""
      << Escape(r.server_version) << "\"},\n";
  out << "  \"parameters\": {\"workers\": " << o.workers
      << ", \"tokens_per_prompt\": " << o.tokens_per_prompt
      << ", \"bytes_per_token\": " << o.bytes_per_token << ", \"chunk_size\": " << o.chunk_size
      << ", \"prompts_per_worker\": " << o.prompts_per_worker << ", \"rounds\": " << o.rounds
      << ", \"pool_gb\": " << o.pool_gb << ", \"lookup_tokens\": " << o.lookup_tokens
      << ", \"quick\": " << (o.quick ? "true" : "false") << "},\n";
  out << "  \"results\": {\n";
  const auto fields = HeadlineFields(r);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    out << "    \"" << fields[i].first << "\": " << Number(fields[i].second)
        << (i + 1 < fields.size() ? ",\n" : "\n");
  }
  out << "  },\n";
  out << "  \"samples\": {\"store_gbps\": " << Samples(r.main.shm.store_samples)
      << ", \"retrieve_gbps\": " << Samples(r.main.shm.retrieve_samples)
      << ", \"socket_store_gbps\": " << Samples(r.main.socket.store_samples)
      << ", \"socket_retrieve_gbps\": " << Samples(r.main.socket.retrieve_samples) << "},\n";
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
