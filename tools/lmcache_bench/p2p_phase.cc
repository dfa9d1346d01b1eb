// The p2p phase of lmcache-bench (p2p_phase.h).
#include "p2p_phase.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "local_redis.h"
#include "phase_support.h"
#include "support/fleet_files.h"
#include "support/local_server.h"
#include "support/server_stats.h"

namespace lmcache::bench {
namespace {

// Prompts are stored and checked this many chunks at a time, so the bench
// holds two windows, not two prompts (a 131072-token prompt is 16 GiB).
constexpr std::uint64_t kWindowChunks = 8;
// A server's pool: what it must hold at once, under the eviction watermark.
constexpr double kPoolHeadroom = 1.0 / 0.7;

std::uint64_t Chunks(const BenchOptions& o, std::uint64_t tokens) { return tokens / o.chunk_size; }
std::uint64_t ObjectBytes(const BenchOptions& o) { return o.chunk_size * o.p2p_bytes_per_token; }

// The pool, in GiB, of a server that must hold `bytes`: the headroom added,
// rounded up to quarter GiB steps, at least 1 GiB.
double PoolGibOf(std::uint64_t bytes) {
  const double gb = static_cast<double>(bytes) * kPoolHeadroom / (1ull << 30);
  return std::max(1.0, std::ceil(gb * 4) / 4);
}
std::string PoolGb(std::uint64_t bytes) { return std::to_string(PoolGibOf(bytes)); }

// CPU seconds process `pid`'s live threads have run, in nanoseconds from
// each thread's /proc/<pid>/task/<tid>/schedstat (/proc/<pid>/stat counts
// clock ticks of 10 ms: a quick run's load is a few of them).
double CpuSeconds(pid_t pid) {
  double nanoseconds = 0;
  std::error_code error;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    std::ifstream schedstat(task.path() / "schedstat");
    double on_cpu = 0;
    if (schedstat >> on_cpu) nanoseconds += on_cpu;
  }
  return nanoseconds / 1e9;
}

// One ucx_perftest run of `test` with `iterations` messages of `size` bytes
// between two processes on loopback, endpoints handling a peer's failure
// (-e) as the servers' do, so UCX picks the same transport: GB/s.
Result<double> Perftest(const std::string& binary, const std::string& test, std::uint64_t size,
                        std::uint64_t iterations) {
  LMC_ASSIGN_OR_RETURN(const std::vector<int> ports, tools::FreeLoopbackTcpPorts(1));
  const int port = ports[0];
  const pid_t server = ::fork();
  if (server < 0) return Status(ErrorCode::kIoError, "fork failed");
  if (server == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    const std::string p = std::to_string(port);
    ::execl(binary.c_str(), binary.c_str(), "-p", p.c_str(), nullptr);
    ::_exit(127);
  }
  const std::string command = binary + " 127.0.0.1 -p " + std::to_string(port) + " -t " + test +
                              " -s " + std::to_string(size) + " -n " + std::to_string(iterations) +
                              " -e 2>&1";
  std::optional<double> mb_per_s;
  std::string output;
  for (int attempt = 0; attempt < 50 && !mb_per_s; ++attempt) {  // until its server listens
    output.clear();
    if (FILE* pipe = ::popen(command.c_str(), "r")) {
      char line[512];
      while (std::fgets(line, sizeof(line), pipe) != nullptr) output += line;
      ::pclose(pipe);
    }
    const auto final_line = output.find("Final:");
    if (final_line != std::string::npos) {
      std::istringstream fields(output.substr(final_line + 6));
      double value = 0;
      for (int i = 0; i < 6 && fields >> value; ++i) {
      }
      if (fields) mb_per_s = value;  // the sixth: overall bandwidth, MB/s (2^20 bytes)
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  for (int i = 0; i < 100 && ::waitpid(server, nullptr, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(server, SIGKILL);
  ::waitpid(server, nullptr, WNOHANG);
  if (!mb_per_s) return Internal("ucx_perftest -t " + test + " gave no result: " + output);
  return *mb_per_s * (1 << 20) / 1e9;
}

struct Node {
  std::unique_ptr<tools::LocalServer> server;
  std::unique_ptr<client::Client> client;
};

Result<Node> StartNode(const BenchOptions& o, const std::string& binary, const std::string& name,
                       std::uint64_t pool_bytes, std::int64_t instance,
                       const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--l1-size-gb", PoolGb(pool_bytes), "--log-level", "warn",
                                   "--chunk-size", std::to_string(o.chunk_size)};
  args.insert(args.end(), extra.begin(), extra.end());
  Node node;
  LMC_ASSIGN_OR_RETURN(node.server, tools::LocalServer::Start(binary, name, args));
  LMC_ASSIGN_OR_RETURN(node.client,
                       ConnectRegistered(node.server->url(), instance,
                                         static_cast<std::int64_t>(o.p2p_bytes_per_token / 4)));
  if (node.client->ObjectBytes() != ObjectBytes(o)) return Internal("unexpected object size");
  return node;
}

// Chunks [first, first + n) of `key`'s prompt.
client::KeySpec Window(client::KeySpec key, std::uint64_t first, std::uint64_t n,
                       std::uint64_t chunk_size) {
  key.start = static_cast<std::int64_t>(first * chunk_size);
  key.end = static_cast<std::int64_t>((first + n) * chunk_size);
  return key;
}

// Chunks [first, first + n) of prompt `prompt`, into the window's `in`.
void FillWindow(RoundMemory& window, std::uint64_t prompt, std::uint64_t first, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    FillChunk(window.in + i * window.object_bytes, window.object_bytes, prompt, first + i);
  }
}

// Stores prompt `prompt` of `chunks` chunks through `c`, a window at a time.
Status StorePrompt(const BenchOptions& o, client::Client& c, RoundMemory& window,
                   std::uint64_t prompt, std::uint64_t chunks) {
  const client::KeySpec key = PromptKey(o, prompt, chunks);
  for (std::uint64_t first = 0; first < chunks; first += kWindowChunks) {
    const std::uint64_t n = std::min(kWindowChunks, chunks - first);
    FillWindow(window, prompt, first, n);
    const auto inputs = window.Inputs();
    LMC_ASSIGN_OR_RETURN(const client::StoreResult stored,
                         c.Store(Window(key, first, n, o.chunk_size), std::span(inputs.data(), n)));
    if (stored.stored != n) return Internal("a server's L1 did not take the prompt");
  }
  return Status::Ok();
}

// Lookup until retrievable: the lookup answers once its prefetch has
// loaded every chunk it found. Seconds; fails unless all `chunks` were found.
Result<double> TimedLookup(client::Client& c, const client::KeySpec& key, std::uint64_t chunks,
                           const char* where) {
  const auto start = SteadyTime::now();
  LMC_ASSIGN_OR_RETURN(const std::size_t hits, c.Lookup(key));
  const double seconds = Seconds(start);
  if (hits != chunks) {
    return Internal(std::string(where) + " found " + std::to_string(hits) + " of " +
                    std::to_string(chunks) + " chunks");
  }
  return seconds;
}

// Retrieves the looked-up prompt a window at a time and checks every byte.
Status RetrieveAndVerify(const BenchOptions& o, client::Client& c, RoundMemory& window,
                         std::uint64_t prompt, std::uint64_t chunks, const char* where) {
  const client::KeySpec key = PromptKey(o, prompt, chunks);
  for (std::uint64_t first = 0; first < chunks; first += kWindowChunks) {
    const std::uint64_t n = std::min(kWindowChunks, chunks - first);
    FillWindow(window, prompt, first, n);
    const auto outputs = window.Outputs();
    LMC_RETURN_IF_ERROR(c.Retrieve(Window(key, first, n, o.chunk_size),
                                   std::span(outputs.data(), n)));
    if (std::memcmp(window.in, window.out, n * window.object_bytes) != 0) {
      return Internal(std::string("bytes retrieved ") + where + " differ from those stored");
    }
  }
  return c.EndSession(key.request_id);
}

Status Release(client::Client& c, const client::KeySpec& key) {
  LMC_RETURN_IF_ERROR(c.FreeLookupLocks(key));
  return c.EndSession(key.request_id);
}

Status Clear(client::Client& c) { return c.Call("clear", {}).status(); }

// MemAvailable of /proc/meminfo, bytes; 0 when unknown.
std::uint64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> name >> kib >> unit) {
    if (name == "MemAvailable:") return kib << 10;
  }
  return 0;
}

// The options with prompts this machine can hold: --p2p-tokens as given
// when it fits; the defaults (the issue's 131072 tokens, about 110 GiB with
// every server and Redis holding it, and a 10240-token TTR prompt) halved
// until they fit, the long prompt first, said on stderr and in the report's
// parameters. RESOURCE_EXHAUSTED when nothing fits: the caller skips the
// phase with that reason.
Result<BenchOptions> FitInMemory(BenchOptions o) {
  const std::uint64_t available = AvailableMemoryBytes();
  if (available == 0 || P2pPhaseBytes(o) <= available) return o;
  if (!o.p2p_tokens_given) {
    const std::uint64_t asked = o.p2p_tokens, asked_ttr = o.p2p_ttr_tokens;
    const std::uint64_t asked_bytes = P2pPhaseBytes(o);
    while (P2pPhaseBytes(o) > available) {
      if (o.p2p_tokens / 2 >= std::max(o.chunk_size, o.p2p_ttr_tokens)) {
        o.p2p_tokens /= 2;
      } else if (o.p2p_ttr_tokens / 2 >= o.chunk_size) {
        o.p2p_ttr_tokens /= 2;
      } else {
        break;
      }
    }
    if (P2pPhaseBytes(o) <= available) {
      std::fprintf(stderr,
                   "[lmcache-bench] the p2p phase's %llu-token prompt (and %llu-token TTR prompt) "
                   "need about %llu MiB and %llu MiB are available: measuring %llu tokens (TTR "
                   "%llu; --p2p-tokens chooses)\n",
                   static_cast<unsigned long long>(asked),
                   static_cast<unsigned long long>(asked_ttr),
                   static_cast<unsigned long long>(asked_bytes >> 20),
                   static_cast<unsigned long long>(available >> 20),
                   static_cast<unsigned long long>(o.p2p_tokens),
                   static_cast<unsigned long long>(o.p2p_ttr_tokens));
      return o;
    }
  }
  return Status(ErrorCode::kResourceExhausted,
                "the p2p phase needs about " + std::to_string(P2pPhaseBytes(o) >> 20) +
                    " MiB of memory for its servers and redis (a " + std::to_string(o.p2p_tokens) +
                    "-token prompt of " + std::to_string(o.p2p_bytes_per_token) +
                    " bytes per token), and " + std::to_string(available >> 20) +
                    " MiB are available: lower --p2p-tokens or --p2p-bytes-per-token");
}

Status WaitPeerReady(client::Client& c) {
  for (int i = 0; i < 1200; ++i) {
    LMC_ASSIGN_OR_RETURN(const tools::ServerStats stats, tools::ServerStats::Fetch(c));
    if (stats.Number("p2p.peers.ready").value_or(0) >= 1) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status(ErrorCode::kTimeout, "node B never saw node A ready (see their logs)");
}

}  // namespace

std::uint64_t P2pPhaseBytes(const BenchOptions& o) {
  const std::uint64_t prompt = Chunks(o, o.p2p_tokens) * ObjectBytes(o);
  const std::uint64_t ttr = Chunks(o, o.p2p_ttr_tokens) * ObjectBytes(o);
  // A holds both prompts; B, C and D the long one; E the short one (each
  // pool as StartNode sizes it); redis the long one.
  const double pools_gib = PoolGibOf(prompt + ttr) + 3 * PoolGibOf(prompt) + PoolGibOf(ttr);
  return static_cast<std::uint64_t>(pools_gib * (1ull << 30) + 1.2 * static_cast<double>(prompt)) +
         4 * kWindowChunks * ObjectBytes(o);
}

Result<P2pFigures> MeasureP2pPhase(const BenchOptions& asked, const std::string& binary) {
  if (!std::filesystem::exists(asked.ucx_perftest)) {
    return Status(ErrorCode::kNotFound,
                  asked.ucx_perftest + " not found: apt-get install ucx-utils, or --skip-p2p");
  }
  LMC_ASSIGN_OR_RETURN(const BenchOptions fitted, FitInMemory(asked));
  const BenchOptions& o = fitted;
  const std::uint64_t chunks = Chunks(o, o.p2p_tokens);
  const std::uint64_t ttr_chunks = Chunks(o, o.p2p_ttr_tokens);
  const std::uint64_t object = ObjectBytes(o);
  const std::uint64_t prompt_bytes = chunks * object;
  const tools::ScopedDirectory scratch(std::filesystem::path(o.l2_dir) /
                                       ("lmcache_bench_p2p_" + std::to_string(::getpid())));
  const std::filesystem::path& dir = scratch.path();
  std::filesystem::create_directories(dir / "fs");
  LMC_ASSIGN_OR_RETURN(const std::string key_file, tools::WriteFleetKeyFile(dir));
  // Picked together: four picks one after another could repeat a port.
  LMC_ASSIGN_OR_RETURN(const std::vector<int> ports, tools::FreeLoopbackTcpPorts(4));
  const int port_a = ports[0], port_b = ports[1], port_c = ports[2], redis_port = ports[3];
  auto fleet = [&](int own, int peer) {
    return std::vector<std::string>{
        "--p2p-advertise-url", "127.0.0.1:" + std::to_string(own), "--p2p-auth-key-file", key_file,
        "--p2p-peers", "tcp://127.0.0.1:" + std::to_string(peer)};
  };
  LMC_ASSIGN_OR_RETURN(auto redis,
                       LocalRedis::Start(o.redis_binary, "lmcache_bench_p2p_redis", redis_port));
  const std::string resp = R"({"type":"resp","url":"redis://127.0.0.1:)" +
                           std::to_string(redis_port) + R"(","key_prefix":"p2p-bench:"})";
  const std::string fs = R"({"type":"fs","base_path":")" + (dir / "fs").string() + R"("})";
  LMC_ASSIGN_OR_RETURN(Node a, StartNode(o, binary, "lmcache_bench_p2p_a",
                                         prompt_bytes + ttr_chunks * object, 9'200'000,
                                         fleet(port_a, port_b)));
  LMC_ASSIGN_OR_RETURN(Node b, StartNode(o, binary, "lmcache_bench_p2p_b", prompt_bytes,
                                         9'200'001, fleet(port_b, port_a)));
  // C reads from A as B does, without the payload digest (--p2p-verify-bytes false).
  std::vector<std::string> unverified = fleet(port_c, port_a);
  unverified.insert(unverified.end(), {"--p2p-verify-bytes", "false"});
  LMC_ASSIGN_OR_RETURN(Node c, StartNode(o, binary, "lmcache_bench_p2p_c", prompt_bytes,
                                         9'200'004, unverified));
  LMC_ASSIGN_OR_RETURN(Node d, StartNode(o, binary, "lmcache_bench_p2p_redis_node", prompt_bytes,
                                         9'200'002, {"--l2-adapter", resp}));
  LMC_ASSIGN_OR_RETURN(Node e, StartNode(o, binary, "lmcache_bench_p2p_fs_node",
                                         ttr_chunks * object, 9'200'003, {"--l2-adapter", fs}));
  LMC_RETURN_IF_ERROR(WaitPeerReady(*b.client));
  LMC_RETURN_IF_ERROR(WaitPeerReady(*c.client));

  // The prompts: the long one on A and, through D, in Redis; the short one on A and in E's fs tier.
  constexpr std::uint64_t kPrompt = 7'000'001, kShortPrompt = 7'000'002;
  RoundMemory window(kWindowChunks, object);
  LMC_RETURN_IF_ERROR(StorePrompt(o, *a.client, window, kPrompt, chunks));
  LMC_RETURN_IF_ERROR(StorePrompt(o, *a.client, window, kShortPrompt, ttr_chunks));
  LMC_RETURN_IF_ERROR(StorePrompt(o, *d.client, window, kPrompt, chunks));
  LMC_RETURN_IF_ERROR(WaitWrittenBehind(*d.client, static_cast<double>(chunks)));
  LMC_RETURN_IF_ERROR(StorePrompt(o, *e.client, window, kShortPrompt, ttr_chunks));
  LMC_RETURN_IF_ERROR(WaitWrittenBehind(*e.client, static_cast<double>(ttr_chunks)));
  LMC_RETURN_IF_ERROR(Clear(*d.client));
  LMC_RETURN_IF_ERROR(Clear(*e.client));

  const client::KeySpec long_key = PromptKey(o, kPrompt, chunks);
  const client::KeySpec short_key = PromptKey(o, kShortPrompt, ttr_chunks);
  const std::uint64_t perftest_messages = std::clamp<std::uint64_t>(chunks, 16, 64);
  P2pFigures f;
  f.prompt_tokens = chunks * o.chunk_size;
  f.object_bytes = object;
  f.ttr_tokens = ttr_chunks * o.chunk_size;
  for (int round = -1; round < o.rounds; ++round) {  // round -1 warms up, untimed
    const bool timed = round >= 0;
    LMC_RETURN_IF_ERROR(Clear(*b.client));
    const double cpu_before = CpuSeconds(a.server->pid());
    LMC_ASSIGN_OR_RETURN(const double load_s,
                         TimedLookup(*b.client, long_key, chunks, "node B, from its peer A,"));
    const double owner_cpu = CpuSeconds(a.server->pid()) - cpu_before;
    LMC_RETURN_IF_ERROR(RetrieveAndVerify(o, *b.client, window, kPrompt, chunks, "on B"));
    // The same load without the digest, right after (alternating which goes
    // first would need A to hold the prompt twice; the rounds interleave).
    LMC_RETURN_IF_ERROR(Clear(*c.client));
    LMC_ASSIGN_OR_RETURN(const double unverified_s,
                         TimedLookup(*c.client, long_key, chunks, "node C, from A undigested,"));
    LMC_RETURN_IF_ERROR(RetrieveAndVerify(o, *c.client, window, kPrompt, chunks, "on C"));
    LMC_ASSIGN_OR_RETURN(const double get,
                         Perftest(o.ucx_perftest, "ucp_get", object, perftest_messages));
    LMC_ASSIGN_OR_RETURN(const double am,
                         Perftest(o.ucx_perftest, "ucp_am_bw", object, perftest_messages));
    LMC_RETURN_IF_ERROR(Clear(*d.client));
    LMC_ASSIGN_OR_RETURN(const double redis_s,
                         TimedLookup(*d.client, long_key, chunks, "node D, from Redis,"));
    LMC_RETURN_IF_ERROR(RetrieveAndVerify(o, *d.client, window, kPrompt, chunks, "on D"));
    LMC_RETURN_IF_ERROR(Clear(*b.client));
    LMC_ASSIGN_OR_RETURN(const double peer_s,
                         TimedLookup(*b.client, short_key, ttr_chunks, "node B, from A,"));
    LMC_RETURN_IF_ERROR(Release(*b.client, short_key));
    LMC_ASSIGN_OR_RETURN(const double l1_s,
                         TimedLookup(*a.client, short_key, ttr_chunks, "node A, in its L1,"));
    LMC_RETURN_IF_ERROR(Release(*a.client, short_key));
    LMC_RETURN_IF_ERROR(Clear(*e.client));
    LMC_ASSIGN_OR_RETURN(const double fs_s,
                         TimedLookup(*e.client, short_key, ttr_chunks, "node E, from its fs tier,"));
    LMC_RETURN_IF_ERROR(Release(*e.client, short_key));
    if (!timed) continue;
    const double gb = static_cast<double>(prompt_bytes) / 1e9;
    f.load_gbps.push_back(gb / load_s);
    f.unverified_load_gbps.push_back(gb / unverified_s);
    f.owner_cpu_s_per_gb.push_back(owner_cpu / gb);
    f.ucp_get_gbps.push_back(get);
    f.ucp_am_bw_gbps.push_back(am);
    f.redis_load_gbps.push_back(gb / redis_s);
    f.ttr_peer_ms.push_back(peer_s * 1e3);
    f.ttr_l1_ms.push_back(l1_s * 1e3);
    f.ttr_fs_ms.push_back(fs_s * 1e3);
  }
  for (Node* node : {&a, &b, &c, &d, &e}) (void)node->client->Unregister();
  return f;
}

}  // namespace lmcache::bench
