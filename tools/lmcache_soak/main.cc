// lmcache-soak: N worker processes against one server for a while, some of
// them killed with SIGKILL and replaced as it runs; then the lock and byte
// balance is checked through `stats`. Exit code 0 only when no byte was
// corrupt, no request failed unexpectedly and everything balanced.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "support/local_server.h"
#include "support/server_stats.h"
#include "lmcache/client.h"
#include "soak.h"

namespace lmcache::soak {
namespace {

using Clock = std::chrono::steady_clock;

void Say(const std::string& text) {
  std::fprintf(stderr, "[lmcache-soak] %s\n", text.c_str());
  std::fflush(stderr);
}

pid_t Spawn(const SoakOptions& o, const std::string& url, int slot, std::int64_t instance,
            SoakCounters* counters) {
  const pid_t pid = fork();
  if (pid == 0) _exit(RunWorker(o, url, slot, instance, counters));
  return pid;
}

// The figures of the balance check, read from the server's stats.
std::map<std::string, double> Balance(const std::string& url) {
  std::map<std::string, double> out;
  client::ClientOptions options;
  options.url = url;
  auto client = client::Client::Connect(options);
  if (!client.ok()) return out;
  auto stats = tools::ServerStats::Fetch(**client);
  if (!stats.ok()) return out;
  for (const char* path :
       {"l1.used_bytes", "l1.resident_bytes", "l1.staging_objects", "l1.locked_objects",
        "l1.retired_objects", "l1.read_locks", "l1.read_leases", "l1.write_leases",
        "instances.registered", "instances.pending_writes", "instances.pending_reads",
        "instances.departed", "instances.replaced", "instances.reaped",
        "instances.released.unregistered", "router.disconnects", "sessions",
        "eviction.evicted_objects", "eviction.on_demand_evictions", "parked.requests",
        "parked.operations.wait_prefetch_status.parked",
        "parked.operations.wait_prefetch_status.deadline",
        "parked.operations.wait_prefetch_status.closed", "l1.tier_admitted_objects",
        "l1.quarantined_objects", "l1.expired_writes_reclaimed", "l2.prefetch.deadline_expired",
        "l2.prefetch.abandoned_loads", "l2.prefetch.abandoned_in_flight",
        "l2.prefetch.loaded_chunks", "l2.prefetch.refused", "l2.adapters.0.loaded_objects",
        "l2.adapters.1.loaded_objects", "p2p.served.tasks", "p2p.served.locked_objects",
        "p2p.served.hit_keys", "p2p.served.reaped_tasks", "p2p.served.ended_life_tasks",
        "p2p.served.abandoned_tasks", "p2p.peers.ready", "p2p.peers.restarts",
        "p2p.channel.read_bytes", "p2p.channel.served_bytes", "p2p.channel.failed_reads"}) {
    if (auto v = stats->Number(path)) out[path] = *v;
  }
  return out;
}

bool Balanced(const std::map<std::string, double>& b) {
  for (const char* zero : {"l1.staging_objects", "l1.locked_objects", "l1.retired_objects",
                           "l1.read_locks", "l1.read_leases", "l1.write_leases",
                           "instances.registered", "instances.pending_writes",
                           "instances.pending_reads", "parked.requests"}) {
    auto it = b.find(zero);
    if (it == b.end() || it->second != 0) return false;
  }
  // Present only with an L2 tier, with P2P, or from newer servers.
  for (const char* zero : {"l1.quarantined_objects", "l2.prefetch.abandoned_in_flight",
                           "p2p.served.tasks", "p2p.served.locked_objects"}) {
    if (auto it = b.find(zero); it != b.end() && it->second != 0) return false;
  }
  return b.count("l1.used_bytes") && b.at("l1.used_bytes") == b.at("l1.resident_bytes");
}

int Run(const SoakOptions& o) {
  std::unique_ptr<SoakNodes> nodes;
  std::vector<std::string> urls = {o.url};
  if (o.url.empty()) {
    std::vector<std::string> args = {"--l1-size-gb", std::to_string(o.pool_gb),
                                     "--max-gpu-workers", "2", "--max-cpu-workers", "2",
                                     "--log-level", "warn", "--session-ttl-seconds",
                                     std::to_string(o.session_ttl_seconds)};
    if (o.l2_mock_gbps > 0 || o.l2_hang_ms > 0) {
      std::string mock = R"({"type":"mock")";
      if (o.l2_mock_gbps > 0) mock += R"(,"mock_bandwidth_gb":)" + std::to_string(o.l2_mock_gbps);
      mock += "}";
      std::string adapter = mock;
      if (o.l2_hang_ms > 0) {
        adapter = R"({"type":"fault_inject","inner":)" + mock + R"(,"delay_ms":)" +
                  std::to_string(o.l2_hang_ms) + R"(,"delay_rate":)" + std::to_string(o.l2_hang_rate) +
                  "}";
        args.insert(args.end(), {"--l2-prefetch-load-timeout", std::to_string(o.l2_load_timeout_seconds)});
      }
      if (o.l2_cascade_first_gb > 0) {
        args.insert(args.end(), {"--l2-adapter", R"({"type":"mock","max_size_gb":)" +
                                                     std::to_string(o.l2_cascade_first_gb) + "}"});
      }
      args.insert(args.end(), {"--l2-adapter", adapter});
    }
    auto started = SoakNodes::Start(tools::FindServerBinary(o.server_binary), o.nodes, args);
    if (!started.ok()) {
      Say(started.status().ToString());
      return 1;
    }
    nodes = std::move(started).value();
    urls.clear();
    for (int n = 0; n < nodes->count(); ++n) urls.push_back(nodes->url(n));
  }
  // Worker slot w works on node w % nodes (its own node's server, as a vLLM worker does).
  auto url_of = [&urls](int slot) -> const std::string& {
    return urls[static_cast<std::size_t>(slot) % urls.size()];
  };
  void* shared = mmap(nullptr, sizeof(SoakCounters), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 1;
  auto* counters = new (shared) SoakCounters();

  std::mt19937_64 rng(o.seed);
  std::int64_t next_instance = 1000;
  std::vector<pid_t> pids;
  std::vector<std::int64_t> instances;
  for (int w = 0; w < o.workers; ++w) {
    instances.push_back(next_instance++);
    pids.push_back(Spawn(o, url_of(w), w, instances.back(), counters));
  }
  // The burst scheduler and the probe run the whole time, never killed.
  std::vector<pid_t> helpers;
  if (o.burst_lookups > 0) {
    for (auto* role : {&RunBurst, &RunProbe}) {
      const pid_t pid = fork();
      if (pid == 0) _exit(role(o, urls[0], counters));
      helpers.push_back(pid);
    }
  }
  Say("running " + std::to_string(o.workers) + " workers on " + std::to_string(urls.size()) +
      " node(s) for " + std::to_string(o.seconds) + " s, killing a worker every " +
      std::to_string(o.kill_every_ms) + " ms" +
      (o.kill_node_every_ms > 0 ? " and a node every " + std::to_string(o.kill_node_every_ms) + " ms"
                                : std::string()));
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(o.seconds);
  auto next_kill = start + std::chrono::milliseconds(o.kill_every_ms);
  auto next_node_kill = start + std::chrono::milliseconds(o.kill_node_every_ms);
  int failed_restarts = 0;
  while (Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (nodes && o.kill_node_every_ms > 0 && Clock::now() >= next_node_kill) {
      // A node dies with its workers (their server is gone); the others'
      // requests must go on, whatever they had asked of it. It comes back
      // as a new boot, with new workers.
      const int victim = static_cast<int>(rng() % static_cast<unsigned>(nodes->count()));
      std::vector<int> slots;
      for (int w = victim; w < o.workers; w += nodes->count()) slots.push_back(w);
      for (const int w : slots) {
        kill(pids[static_cast<std::size_t>(w)], SIGKILL);
        waitpid(pids[static_cast<std::size_t>(w)], nullptr, 0);
        counters->kills.fetch_add(1);
      }
      if (Status restarted = nodes->KillAndRestart(victim); !restarted.ok()) {
        Say("node " + std::to_string(victim) + " did not come back: " + restarted.ToString());
        failed_restarts += 1;
        break;
      }
      counters->node_kills.fetch_add(1);  // same endpoints: urls stand
      for (const int w : slots) {
        instances[static_cast<std::size_t>(w)] = next_instance++;
        pids[static_cast<std::size_t>(w)] =
            Spawn(o, url_of(w), w, instances[static_cast<std::size_t>(w)], counters);
      }
      next_node_kill = Clock::now() + std::chrono::milliseconds(o.kill_node_every_ms);
    }
    if (o.kill_every_ms <= 0 || Clock::now() < next_kill) continue;
    next_kill += std::chrono::milliseconds(o.kill_every_ms);
    const int victim = static_cast<int>(rng() % static_cast<unsigned>(o.workers));
    kill(pids[static_cast<std::size_t>(victim)], SIGKILL);
    waitpid(pids[static_cast<std::size_t>(victim)], nullptr, 0);
    counters->kills.fetch_add(1);
    // A third of the replacements come back with the same instance id (a
    // restarted worker), the rest with a new one.
    if (rng() % 3 != 0) instances[static_cast<std::size_t>(victim)] = next_instance++;
    pids[static_cast<std::size_t>(victim)] =
        Spawn(o, url_of(victim), victim, instances[static_cast<std::size_t>(victim)], counters);
  }
  counters->stop.store(true);
  int failed_workers = 0;
  for (const pid_t pid : helpers) pids.push_back(pid);
  for (const pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_workers += 1;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

  // Departures are processed asynchronously: give them a moment to land, but
  // far less than a session TTL (--session-ttl-seconds should stay above
  // 10 s): what balances only by expiring was leaked by a closed connection.
  std::vector<std::map<std::string, double>> balances(urls.size());
  const auto stopped = Clock::now();
  bool balanced = false;
  for (int i = 0; i < 100 && !balanced; ++i) {
    balanced = true;
    for (std::size_t n = 0; n < urls.size(); ++n) {
      balances[n] = Balance(urls[n]);
      balanced = balanced && Balanced(balances[n]);
    }
    if (!balanced) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // In a fleet, chunks must have crossed between nodes (or nothing here tested P2P).
  double peer_bytes = 0;
  for (const auto& b : balances) {
    if (auto it = b.find("p2p.channel.read_bytes"); it != b.end()) peer_bytes += it->second;
  }
  const bool crossed = urls.size() == 1 || peer_bytes > 0;
  const double balance_seconds = std::chrono::duration<double>(Clock::now() - stopped).count();
  if (o.session_ttl_seconds <= 10) {
    Say("note: a session TTL of 10 s or less lets expiry hide a lock a closed connection leaked");
  }
  const bool ok = balanced && crossed && failed_restarts == 0 && counters->corrupt_chunks.load() == 0 &&
                  counters->unexpected_errors.load() == 0 && failed_workers == 0 &&
                  counters->chunks_verified.load() > 0;

  std::map<std::string, double> report = {
      {"seconds", elapsed},
      {"workers", o.workers},
      {"iterations", static_cast<double>(counters->iterations.load())},
      {"stores", static_cast<double>(counters->stores.load())},
      {"chunks_stored", static_cast<double>(counters->chunks_stored.load())},
      {"chunks_out_of_memory", static_cast<double>(counters->chunks_out_of_memory.load())},
      {"lookups", static_cast<double>(counters->lookups.load())},
      {"retrieves", static_cast<double>(counters->retrieves.load())},
      {"chunks_verified", static_cast<double>(counters->chunks_verified.load())},
      {"gib_verified", static_cast<double>(counters->bytes_verified.load()) / (1u << 30)},
      {"corrupt_chunks", static_cast<double>(counters->corrupt_chunks.load())},
      {"abandoned_lookups", static_cast<double>(counters->abandoned_lookups.load())},
      {"abandoned_stores", static_cast<double>(counters->abandoned_stores.load())},
      {"reregistrations", static_cast<double>(counters->reregistrations.load())},
      {"registrations", static_cast<double>(counters->registrations.load())},
      {"kills", static_cast<double>(counters->kills.load())},
      {"nodes", static_cast<double>(urls.size())},
      {"node_kills", static_cast<double>(counters->node_kills.load())},
      {"failed_node_restarts", failed_restarts},
      {"gib_loaded_from_peers", peer_bytes / (1u << 30)},
      {"burst_lookups", static_cast<double>(counters->burst_lookups.load())},
      {"probe_samples", static_cast<double>(counters->probe_samples.load())},
      {"probe_lookup_p50_ms", counters->probe_lookup_p50_us.load() / 1000.0},
      {"probe_lookup_p99_ms", counters->probe_lookup_p99_us.load() / 1000.0},
      {"probe_lookup_max_ms", counters->probe_lookup_max_us.load() / 1000.0},
      {"probe_stats_max_ms", counters->probe_stats_max_us.load() / 1000.0},
      {"unexpected_errors", static_cast<double>(counters->unexpected_errors.load())},
      {"failed_workers", failed_workers},
      {"balanced", balanced ? 1 : 0},
      {"balanced_after_seconds", balance_seconds},
  };
  for (std::size_t n = 0; n < balances.size(); ++n) {
    const std::string prefix = urls.size() == 1 ? "final." : "final.node" + std::to_string(n) + ".";
    for (const auto& [name, value] : balances[n]) report[prefix + name] = value;
  }
  std::string json = "{";
  for (const auto& [name, value] : report) {
    json += (json.size() > 1 ? ", " : "") + std::string("\"") + name + "\": " + std::to_string(value);
  }
  json += "}";
  std::printf("%s\n", json.c_str());
  if (!o.json_path.empty()) std::ofstream(o.json_path) << json << "\n";
  if (!crossed) Say("no chunk crossed between the nodes: P2P was not exercised");
  Say(ok ? "PASS: no corruption, no unexpected error, every lock and byte balanced"
         : "FAIL: see the report above");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace lmcache::soak

int main(int argc, char** argv) {
  lmcache::soak::SoakOptions o;
  CLI::App app{"lmcache-soak: worker processes with kill -9 against one lmcache-server; checks "
               "bytes and the final lock and byte balance"};
  app.add_option("--url", o.url, "Use this server instead of starting one (it must be idle)");
  app.add_option("--server-binary", o.server_binary, "lmcache-server to start");
  app.add_option("--workers", o.workers, "Worker processes")->capture_default_str();
  app.add_option("--seconds", o.seconds, "How long to run")->capture_default_str();
  app.add_option("--kill-every-ms", o.kill_every_ms, "SIGKILL a random worker this often; 0: never")
      ->capture_default_str();
  app.add_option("--pool-gb", o.pool_gb, "Pool of the started server (small: eviction runs)")
      ->capture_default_str();
  app.add_option("--groups", o.groups, "Shared system prompts")->capture_default_str();
  app.add_option("--prompts", o.prompts, "Distinct prompts")->capture_default_str();
  app.add_option("--seed", o.seed, "Random seed")->capture_default_str();
  app.add_option("--json", o.json_path, "Write the report here too");
  app.add_option("--burst-lookups", o.burst_lookups,
                 "The burst case: a scheduler sends this many lookups with fresh request ids, "
                 "never ended, every --burst-every-seconds, while a probe times another client's "
                 "lookup and stats (0: off)")
      ->capture_default_str();
  app.add_option("--burst-every-seconds", o.burst_every_seconds, "Seconds between bursts")
      ->capture_default_str();
  app.add_option("--l2-mock-gbps", o.l2_mock_gbps,
                 "The slow-L2 case: the started server gets a mock L2 tier of this bandwidth "
                 "(GB/s), so lookups of evicted prompts load from it and their waits park "
                 "(0: no L2)")
      ->capture_default_str();
  app.add_option("--l2-hang-ms", o.l2_hang_ms,
                 "The hung-L2 case: the L2 tier's calls stall this long at --l2-hang-rate, "
                 "against a prefetch deadline of --l2-load-timeout-seconds (0: off)")
      ->capture_default_str();
  app.add_option("--l2-hang-rate", o.l2_hang_rate, "Share of L2 calls that stall")
      ->capture_default_str();
  app.add_option("--l2-load-timeout-seconds", o.l2_load_timeout_seconds,
                 "--l2-prefetch-load-timeout of the started server in the hung-L2 case")
      ->capture_default_str();
  app.add_option("--l2-cascade-first-gb", o.l2_cascade_first_gb,
                 "The cascade case: a first mock L2 adapter of this many GB in front of the "
                 "slow-L2 tier, so prefetches load from both at once (0: off)")
      ->capture_default_str();
  app.add_option("--session-ttl-seconds", o.session_ttl_seconds,
                 "--session-ttl-seconds of the started server (the bursts expire after it)")
      ->capture_default_str();
  app.add_option("--nodes", o.nodes,
                 "The fleet case: this many servers sharing over P2P on loopback, workers "
                 "spread over them (1: one server)")
      ->capture_default_str();
  app.add_option("--kill-node-every-ms", o.kill_node_every_ms,
                 "In the fleet case, SIGKILL a random node (with its workers) this often and "
                 "start it again; 0: never")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.nodes < 1 || o.nodes > 16 || (o.nodes > 1 && (!o.url.empty() || o.burst_lookups > 0))) {
    std::fprintf(stderr, "lmcache-soak: --nodes must be in [1, 16], and more than 1 starts its "
                         "own servers (no --url) without --burst-lookups\n");
    return 2;
  }
  if (o.workers < 1 || o.groups < 1 || o.prompts < o.groups || o.seconds <= 0) {
    std::fprintf(stderr, "lmcache-soak: need workers >= 1, prompts >= groups >= 1, seconds > 0\n");
    return 2;
  }
  return lmcache::soak::Run(o);
}
