#include "daemon/config.h"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/logging.h"
#include "common/unique_fd.h"
#include "common/system_info.h"
#include "daemon/endpoints.h"
#include "shm/shm_name.h"

namespace lmcache::daemon {

namespace {

// --allow-uids: "" (the server's own user only), "all" (nullopt: every
// local user), or uids and user names, comma-separated.
Result<std::optional<std::set<uid_t>>> ParseAllowedUids(const std::string& list) {
  if (list == "all") return std::optional<std::set<uid_t>>{};
  std::set<uid_t> uids;
  std::stringstream entries(list);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    if (entry.empty()) continue;
    if (std::all_of(entry.begin(), entry.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
        entry.size() <= 10) {
      const unsigned long long uid = std::stoull(entry);
      if (uid > 0xfffffffeULL) {
        return InvalidConfig("--allow-uids: uid " + entry + " is out of range");
      }
      uids.insert(static_cast<uid_t>(uid));
      continue;
    }
    const passwd* user = ::getpwnam(entry.c_str());
    if (user == nullptr) {
      return InvalidConfig("--allow-uids: '" + entry + "' is neither a uid nor a user of this "
                           "host; give uids, user names or 'all'");
    }
    uids.insert(user->pw_uid);
  }
  return std::optional<std::set<uid_t>>(std::move(uids));
}

}  // namespace

void AddFlags(CLI::App& app, ServerConfig* c) {
  app.add_option("--url", c->urls,
                 "Endpoint to serve, repeatable: tcp://HOST:PORT or ipc:///PATH (an ipc socket "
                 "file is created with mode 0600). Default: tcp://--host:--port");
  // Given together with --url, --host/--port add a tcp endpoint; alone they name the default one.
  app.add_option("--host", c->host, "Host of the tcp endpoint (the reference's spelling)")
      ->capture_default_str()
      ->each([c](const std::string&) { c->host_or_port_given = true; });
  app.add_option("--port", c->port, "Port of the tcp endpoint")
      ->capture_default_str()
      ->each([c](const std::string&) { c->host_or_port_given = true; });
  app.add_option("--allow-uids", c->allow_uids,
                 "Local users, besides the server's own, whose processes may send requests over "
                 "a loopback tcp endpoint: comma-separated uids or user names, or 'all' (any "
                 "local user could otherwise learn which of another user's prompts are cached; "
                 "docs/security.md). Peers on other hosts reach only an endpoint bound beyond "
                 "loopback, and ipc endpoints are mode 0600");
  app.add_option("--chunk-size", c->chunk_size,
                 "Tokens per chunk (the unit of caching): every model's, unless "
                 "--model-chunk-size gives it its own, and the smallest any model may have")
      ->capture_default_str();
  app.add_option("--model-chunk-size", c->model_chunk_sizes,
                 "MODEL=TOKENS, repeatable: the chunk size of one model (the model_name its "
                 "workers register), e.g. a hybrid model whose KV groups need chunks of 640. "
                 "Its workers learn it from get_chunk_size over the endpoint bound for it "
                 "(--model-url)");
  app.add_option("--model-url", c->model_urls,
                 "MODEL=URL, repeatable: an endpoint (tcp:// or ipc://, as --url) bound for one "
                 "model: get_chunk_size answers that model's chunk size there. Keys of a model "
                 "are served only over an endpoint that answers its chunk size");
  app.add_option("--max-workers", c->max_workers, "Default size of both request thread pools")
      ->capture_default_str();
  app.add_option("--max-gpu-workers", c->max_gpu_workers,
                 "Threads of the transfer pool (prepare/commit store and retrieve), one queue "
                 "per thread keyed by client; 0 = --max-workers")
      ->capture_default_str();
  app.add_option("--max-cpu-workers", c->max_cpu_workers,
                 "Threads of the general pool (lookup, prefetch status, sessions, clear, "
                 "stats; ping runs inline); "
                 "0 = --max-workers")
      ->capture_default_str();
  app.add_option("--worker-reap-timeout-seconds", c->worker_reap_timeout_seconds,
                 "Seconds of silence after which a worker that has sent requests is "
                 "unregistered and its pending transfers released; 0 disables, else >= 30")
      ->capture_default_str();
  app.add_option("--worker-registration-grace-seconds", c->worker_registration_grace_seconds,
                 "Seconds a worker that registered but never sent another request is kept; "
                 ">= the reap timeout")
      ->capture_default_str();
  app.add_option("--session-ttl-seconds", c->session_ttl_seconds,
                 "Seconds after its last use that a request's session (cached hashes, lookup "
                 "state) is dropped")
      ->capture_default_str();
  app.add_option("--session-memory-mb", c->session_memory_mb,
                 "MiB that all sessions together may hold (chunk hashes and lookup state of "
                 "requests in flight); past it the least recently used sessions are dropped")
      ->capture_default_str();
  app.add_option(
         "--hash-cache-mb", c->hash_cache_mb,
         "MiB of the cache of chunk hashes shared by all requests (a prompt whose prefix "
         "was seen before skips hashing it; chunks of up to 8 tokens are always hashed, which "
         "costs less); 0 disables")
      ->capture_default_str();
  app.add_option("--admin-ops", c->admin_ops,
                 "Who may run destructive operations (clear over ZMQ, POST /clear-cache over "
                 "HTTP): ipc (peers of an ipc endpoint, whose socket file is 0600, and HTTP "
                 "requests past the admin token), local (ipc and loopback peers: every local "
                 "user), any, or off")
      ->capture_default_str();
  app.add_option("--gpu-backend", c->gpu_backend,
                 "Device side of the CUDA-IPC path (register_kv_cache, store, retrieve): cuda, or "
                 "emulated (shared memory stands in for GPU memory, for tests without a GPU). No "
                 "CUDA call is made until a worker registers a GPU KV cache")
      ->capture_default_str();
  app.add_option("--gpu-event-timeout-ms", c->gpu_event_timeout_ms,
                 "Longest wait of a CUDA-IPC transfer for the engine's event; then it fails with "
                 "nothing copied (an engine killed mid-step), so a dead engine's mappings close")
      ->capture_default_str();
  app.add_option("--max-client-queue-mb", c->max_client_queue_mb,
                 "MiB of requests one client may have queued per thread pool; beyond it its "
                 "requests are refused (402) while other clients are still served")
      ->capture_default_str();
  app.add_option("--max-queue-mb", c->max_queue_mb,
                 "MiB of requests all clients together may have queued per thread pool")
      ->capture_default_str();
  app.add_option("--hash-algorithm", c->hash_algorithm,
                 "Chunk hash: blake3 (the only one; the reference's default)")
      ->capture_default_str();
  // Reference flags kept so its command lines work here unchanged.
  app.add_option("--engine-type", c->engine_type,
                 "Reference compatibility: 'default' only (CacheBlend is out of scope)")
      ->capture_default_str();
  app.add_option("--kv-load-policy", c->kv_load_policy,
                 "Reference compatibility: how a lookup decides between loading and letting the "
                 "engine recompute. DEFAULT (the reference's built-in): every lookup loads "
                 "unless its request_configs set lmcache.skip_load")
      ->capture_default_str();
  app.add_option("--prefill-tokens-per-second", c->prefill_rates,
                 "The load-or-recompute policy (off without it): MODEL=RATE, the tokens per "
                 "second the model's engine prefills (repeat for more models; * names every "
                 "other model). A lookup then loads from L2 only the prefix of chunks whose "
                 "load, at each tier's measured rate, is faster than recomputing them; L1 hits "
                 "always count")
      ->take_all();
  app.add_option("--supported-transfer-mode", c->supported_transfer_mode,
                 "Transfer modes served: auto (both), engine_driven (the shared-memory path: "
                 "workers copy through the pool) or lmcache_driven (the CUDA-IPC path: the "
                 "server copies between the workers' GPUs and L1); the other mode's "
                 "operations are refused")
      ->capture_default_str();
  app.add_option("--instance-id", c->instance_id,
                 "Reference compatibility: an identity for this server, shown in server_info");
  app.add_flag("--l1-use-lazy,!--no-l1-use-lazy", c->l1_use_lazy,
               "Reference compatibility: the pool is always allocated and pre-faulted at "
               "startup (shared memory needs it), so lazy growth is not available");
  app.add_option("--l1-init-size-gb", c->l1_init_size_gb,
                 "Reference compatibility: ignored (the whole pool is allocated at startup)");
  app.add_option("--l1-size-gb", c->l1_size_gb,
                 "Size of the L1 shared-memory pool in GiB (2^30 bytes; fractions allowed). "
                 "Default: a quarter of physical memory in whole GiB, at least 1 (" +
                     std::to_string(static_cast<int>(DefaultL1SizeGb())) + " on this machine)");
  app.add_option("--shm-name", c->shm_name,
                 "Name of the pool segment under /dev/shm; a leading '/' is dropped and the prefix "
                 "'lmcache_l1_pool_' added when missing. Default: lmcache_l1_pool_<server pid>");
  app.add_option("--l1-align-bytes", c->l1_align_bytes,
                 "Alignment and size granule of every L1 object, in bytes (power of two >= 64)")
      ->capture_default_str();
  app.add_option("--l1-write-ttl-seconds", c->l1_write_ttl_seconds,
                 "Write lease in seconds: a staged object not committed within it is freed")
      ->capture_default_str();
  app.add_option("--l1-read-ttl-seconds", c->l1_read_ttl_seconds,
                 "Read lease in seconds: after it a read-locked object becomes evictable again")
      ->capture_default_str();
  app.add_option("--eviction-policy", c->eviction_policy, "L1 eviction policy: LRU or noop")
      ->capture_default_str();
  app.add_option("--quota-mode", c->quota_mode,
                 "Per-tenant (cache_salt) L1 quotas: on (a tenant with a quota is capped at it "
                 "and evicts its own oldest objects to stay within it; the rest are unbounded), "
                 "allowlist (a tenant without a quota caches nothing) or off (no accounting)")
      ->capture_default_str();
  app.add_option("--quota", c->quotas,
                 "A tenant's L1 quota from the start, SALT=GB (repeat for more; _default names "
                 "the empty salt); PUT /quota/{salt} sets them at run time")
      ->take_all();
  app.add_option("--max-pinned-fraction", c->max_pinned_fraction,
                 "Fraction of the pool, in [0, 1), that objects pinned over HTTP (POST "
                 "/cache/pins) may take; a first pin beyond it is refused")
      ->capture_default_str();
  app.add_option("--eviction-trigger-watermark", c->eviction_trigger_watermark,
                 "Fraction of the pool in use, in (0, 1], at which background eviction starts")
      ->capture_default_str();
  app.add_option("--eviction-ratio", c->eviction_ratio,
                 "Fraction of the pool, in (0, 1], that one eviction pass frees: it evicts until "
                 "usage <= trigger watermark - ratio")
      ->capture_default_str();
  app.add_option("--eviction-interval-ms", c->eviction_interval_ms,
                 "Milliseconds between background eviction passes")
      ->capture_default_str();
  app.add_flag("--on-demand-eviction,!--no-on-demand-eviction", c->on_demand_eviction,
               "When a store cannot allocate, evict unlocked LRU objects at once to make room "
               "(default: on)");
  app.add_option("--l1-hugepages", c->l1_hugepages,
                 "Huge pages for the L1 pool: auto uses them where the mount of /dev/shm gives "
                 "them (hugetlbfs, or tmpfs with huge=within_size|always|advise), on refuses to "
                 "start without them, off never asks (docs/deploy/README.md)")
      ->capture_default_str();
  app.add_option("--prefault-threads", c->prefault_threads,
                 "Threads that pre-fault the pool at startup; 0 = one per core")
      ->capture_default_str();
  app.add_option("--l2-adapter", c->l2_adapters,
                 "An L2 tier behind L1, as JSON (repeatable; the order is the cascade), e.g. "
                 "'{\"type\":\"fs\",\"base_path\":\"/data/l2\",\"max_size_gb\":500}'. "
                 "Types: fs, mock, fault_inject");
  app.add_option("--l2-fs-root", c->l2_fs_root,
                 "The directory under which POST /config/adapters may add fs adapters (their "
                 "base_path must lie inside it); without it, fs adapters are added only at start");
  app.add_option("--l2-store-policy", c->l2_store_policy,
                 "default: write every new object to every L2 adapter and keep it in L1; skip_l1: "
                 "then delete it from L1")
      ->capture_default_str();
  app.add_option("--l2-prefetch-policy", c->l2_prefetch_policy,
                 "default or retain: objects loaded from L2 stay in L1 as ordinary objects "
                 "(evicted by LRU) either way")
      ->capture_default_str();
  app.add_option("--l2-prefetch-max-in-flight", c->l2_prefetch_max_in_flight,
                 "Lookups loading from L2 at once; later ones wait in order")
      ->capture_default_str();
  app.add_option("--l2-prefetch-load-timeout", c->l2_prefetch_load_timeout,
                 "Seconds a prefetch may load before it returns the prefix it has; 0 = no limit")
      ->capture_default_str();
  app.add_option("--l2-store-workers", c->l2_store_workers,
                 "Threads writing new objects to L2")
      ->capture_default_str();
  app.add_option("--l2-store-queue-mb", c->l2_store_queue_mb,
                 "MiB of new objects that may wait for L2; beyond it new objects are not written "
                 "to L2 (counted), and stores never wait")
      ->capture_default_str();
  app.add_option("--l2-store-queue-objects", c->l2_store_queue_objects,
                 "New objects that may wait for L2 (each costs about 250 bytes while it "
                 "waits); beyond it, as beyond --l2-store-queue-mb. Raise it with small chunks: "
                 "at --chunk-size 1 one prompt is one object per token")
      ->capture_default_str();
  app.add_option("--periodic-notifier-interval-ms", c->periodic_notifier_interval_ms,
                 "Accepted for compatibility; this server's controllers are woken, never polled")
      ->capture_default_str();
  app.add_option("--log-level", c->log_level,
                 "Log level: trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  app.add_option("--log-format", c->log_format,
                 "text, or json (one object per line, for log pipelines)")
      ->capture_default_str();
  app.add_option("--log-file", c->log_file,
                 "Append the log to this file instead of stderr; SIGHUP reopens it (rotation)");
  app.add_option("--http-host", c->http_host, "Address of the HTTP endpoint (health, status, metrics)")
      ->capture_default_str();
  app.add_option("--http-port", c->http_port,
                 "Port of the HTTP endpoint: /healthcheck, /status, /metrics, ...; 0 = no HTTP")
      ->capture_default_str();
  app.add_flag("--http-read-only", c->http_read_only,
               "Refuse the HTTP routes that change anything (/clear-cache, PUT /loglevel), even "
               "with a token");
  app.add_option("--http-admin-token-file", c->http_admin_token_file,
                 "Turn on the HTTP routes that change anything for requests that carry "
                 "'Authorization: Bearer <token>', the token being this file's content (at least "
                 "16 characters; the file must not be readable by group or others). Without it "
                 "or --http-admin-open they are off: every local process reaches the HTTP port");
  app.add_flag("--http-admin-open", c->http_admin_open,
               "Turn on the HTTP routes that change anything for every peer that reaches the "
               "HTTP port, with no token (the earlier default)");
  app.add_option("--drain-timeout-seconds", c->drain_timeout_seconds,
                 "On SIGTERM, refuse new registrations and wait this long for registered workers "
                 "to leave and queued work to finish, then exit; a second signal exits at once")
      ->capture_default_str();
  app.add_flag("--takeover{on}", c->takeover,
               "Warm restart: take the L1 pool, its objects and the workers' registrations over "
               "from the server running on the same pool (found on --takeover-socket) instead of "
               "starting cold; it drains, hands over and exits, and this server binds its "
               "endpoints. Nobody to take over from: a cold start. A pool of another geometry "
               "(size, alignment, chunk size) is refused unless --takeover=if-compatible, which "
               "starts cold then (the old pool is removed)")
      ->capture_default_str();
  app.add_option("--takeover-socket", c->takeover_socket,
                 "Unix socket on which this server hands its pool over to a successor "
                 "(--takeover); 'auto' = <--shm-dir>/.lmcache-takeover-<pool name>, 'off' = none. "
                 "A successor started without --shm-name needs it given explicitly")
      ->capture_default_str();
  app.add_option("--after-handover", c->after_handover,
                 "What a server does once it handed its pool over: 'exit' (0), or 'wait' for "
                 "SIGTERM without serving (a Kubernetes pod, which would otherwise be restarted "
                 "and take the pool back; docs/deploy)")
      ->capture_default_str();
  app.add_flag("--recover-pool", c->recover_pool,
               "Keep a crash-recovery journal of the L1 pool, and at start adopt the pool a "
               "crashed server of the same --shm-name left: every object whose checksum verifies "
               "is served again, the rest is dropped (needs --shm-name)");
  app.add_option("--takeover-timeout-seconds", c->takeover_timeout_seconds,
                 "How long --takeover waits for the running server to drain and hand over")
      ->capture_default_str();
  app.add_option("--kv-event-log-size", c->kv_event_log_size,
                 "KV events (what L1 and L2 came to hold or lost, for KV-aware routers: "
                 "poll_kv_events, --kv-events-url; recorded from the first poll, or from startup with "
                 "--kv-events-url): the newest records kept; "
                 "0 turns the channel off")
      ->capture_default_str();
  app.add_option("--kv-event-log-mb", c->kv_event_log_mb,
                 "MiB the KV event log may hold; past it (or --kv-event-log-size) the oldest "
                 "records go and a reader that had not read them is told it lost some")
      ->capture_default_str();
  app.add_option("--kv-event-token-cache-mb", c->kv_event_token_cache_mb,
                 "MiB of the tokens of recently stored chunks, which their stored events carry; a "
                 "chunk admitted after its tokens were forgotten gets no stored event (counted)")
      ->capture_default_str();
  app.add_option("--kv-events-url", c->kv_events_url,
                 "Publish KV events on a ZMQ PUB socket bound here (e.g. tcp://*:5557) in vLLM's "
                 "KV-events format (BlockStored, BlockRemoved, AllBlocksCleared), for routers that "
                 "consume vLLM's events; off by default");
  app.add_option("--kv-events-replay-url", c->kv_events_replay_url,
                 "With --kv-events-url: a ROUTER socket bound here replays buffered messages from "
                 "a sequence number (vLLM's replay_endpoint)");
  app.add_option("--kv-events-topic", c->kv_events_topic,
                 "Topic frame of the published messages (vLLM's default: empty); {model} is "
                 "replaced by each model's name, one message per model (llm-d: kv@POD@{model})");
  app.add_option("--kv-events-hash-format", c->kv_events_hash_format,
                 "Block hashes on --kv-events-url: int (the digest's low 64 bits, vLLM's default) "
                 "or bytes (all 32 bytes)")
      ->capture_default_str();
  app.add_option("--ready-prefault-fraction", c->ready_prefault_fraction,
                 "/healthcheck answers 503 until this fraction of the pool is pre-faulted "
                 "(requests are served before either way); 0 = ready at once")
      ->capture_default_str();
  AddP2pFlags(app, &c->p2p);
}

namespace {

Status ParsePrefillRates(const std::vector<std::string>& given,
                         std::map<std::string, double>* rates) {
  for (const std::string& item : given) {
    const std::size_t eq = item.rfind('=');
    const std::string model = eq == std::string::npos ? "" : item.substr(0, eq);
    const std::string text = eq == std::string::npos ? "" : item.substr(eq + 1);
    char* end = nullptr;
    const double rate = std::strtod(text.c_str(), &end);
    const bool number = !text.empty() && end == text.c_str() + text.size();
    if (model.empty() || !number || !(rate > 0) || !std::isfinite(rate)) {
      return InvalidConfig("--prefill-tokens-per-second '" + item +
                           "': expected MODEL=RATE with a rate > 0 tokens per second, for "
                           "example meta-llama/Llama-3.1-8B=12000 (or *=12000 for every model)");
    }
    if (!rates->emplace(model, rate).second) {
      return InvalidConfig("--prefill-tokens-per-second names '" + model + "' twice");
    }
  }
  return Status::Ok();
}

// --model-url MODEL=URL: each URL tcp:// or ipc://, each model named once and
// given its own chunk size (an endpoint of a model at the default size
// would answer what every endpoint answers).
Result<std::vector<transport::RouterConfig::ModelEndpoint>> ParseModelUrls(
    const std::vector<std::string>& specs, const store::ChunkSizes::Overrides& sizes) {
  std::vector<transport::RouterConfig::ModelEndpoint> out;
  std::set<std::string> models;
  for (const std::string& spec : specs) {
    const std::string what = "--model-url '" + spec + "'";
    // The first '=' that opens a URL: a model name may hold '=' itself.
    const std::size_t at = std::min(spec.find("=tcp://"), spec.find("=ipc://"));
    if (at == std::string::npos || at == 0) {
      return InvalidConfig(what + ": give MODEL=URL with a tcp:// or ipc:// URL");
    }
    transport::RouterConfig::ModelEndpoint endpoint{spec.substr(0, at), spec.substr(at + 1)};
    if (!sizes.contains(endpoint.model)) {
      return InvalidConfig(what + ": model " + endpoint.model +
                           " has no --model-chunk-size; its workers use an endpoint of every "
                           "model (--url), or give it --model-chunk-size " +
                           endpoint.model + "=TOKENS");
    }
    if (!models.insert(endpoint.model).second) {
      return InvalidConfig(what + ": model " + endpoint.model + " is named twice");
    }
    out.push_back(std::move(endpoint));
  }
  // A model of its own size is served only where that size is advertised
  // (store::ChunkSizes::CheckServedAt): by its endpoint, or another model's
  // of the same size. Without one its workers would be refused every time.
  for (const auto& [model, size] : sizes) {
    const std::int64_t wanted = size;  // clang 14 captures no structured binding
    const bool advertised = std::ranges::any_of(
        out, [&](const auto& endpoint) { return sizes.at(endpoint.model) == wanted; });
    if (!advertised) {
      return InvalidConfig("--model-chunk-size " + model + "=" + std::to_string(size) +
                           ": no endpoint answers get_chunk_size with " + std::to_string(size) +
                           ", so its workers could never be served; bind one with --model-url " +
                           model + "=URL");
    }
  }
  return out;
}

Status FinalizeTransport(ServerConfig* c) {
  LMC_RETURN_IF_ERROR(store::CheckChunkSize(c->chunk_size, "--chunk-size"));
  if (c->engine_type != "default") {
    return InvalidConfig("--engine-type '" + c->engine_type +
                         "' is not supported: lmcache-server serves 'default' only");
  }
  if (c->kv_load_policy != "DEFAULT") {
    return InvalidConfig("--kv-load-policy '" + c->kv_load_policy +
                         "' is not supported: lmcache-server has the reference's built-in "
                         "DEFAULT policy only (a 'package.module:ClassName' policy is a Python "
                         "plugin of the reference's server); use DEFAULT, and "
                         "lmcache.skip_load per request");
  }
  if (c->supported_transfer_mode != "auto" && c->supported_transfer_mode != "engine_driven" &&
      c->supported_transfer_mode != "lmcache_driven") {
    return InvalidConfig(
        "--supported-transfer-mode must be auto, engine_driven or "
        "lmcache_driven, got '" +
        c->supported_transfer_mode + "'");
  }
  if (c->l1_use_lazy) {
    c->notices.push_back(
        "--l1-use-lazy is ignored: the shared-memory pool is allocated and "
        "pre-faulted at startup");
  }
  if (c->l1_init_size_gb != 0) {
    c->notices.push_back("--l1-init-size-gb is ignored: the whole pool is allocated at startup");
  }
  if (c->hash_algorithm != "blake3") {
    return InvalidConfig("--hash-algorithm: only blake3 is supported (got '" + c->hash_algorithm +
                         "'); it is the reference's default");
  }
  if (c->max_workers < 1) return InvalidConfig("--max-workers must be >= 1");
  if (c->worker_reap_timeout_seconds != 0 && c->worker_reap_timeout_seconds < 30) {
    return InvalidConfig("--worker-reap-timeout-seconds must be 0 (off) or >= 30, got " +
                         std::to_string(c->worker_reap_timeout_seconds));
  }
  if (c->worker_registration_grace_seconds < c->worker_reap_timeout_seconds) {
    return InvalidConfig(
        "--worker-registration-grace-seconds must be >= "
        "--worker-reap-timeout-seconds");
  }
  if (c->session_ttl_seconds <= 0) return InvalidConfig("--session-ttl-seconds must be > 0");
  for (const std::string& url : c->urls) {
    if (!url.starts_with("tcp://") && !url.starts_with("ipc://")) {
      return InvalidConfig("--url '" + url + "' must start with tcp:// or ipc://");
    }
  }
  transport::RouterConfig& router = c->router;
  router.urls = c->urls;
  LMC_ASSIGN_OR_RETURN(store::ChunkSizes::Overrides model_sizes,
                       store::ParseModelChunkSizes(c->model_chunk_sizes, c->chunk_size));
  LMC_ASSIGN_OR_RETURN(router.model_urls, ParseModelUrls(c->model_urls, model_sizes));
  c->service.chunk_sizes = store::ChunkSizes(c->chunk_size, std::move(model_sizes));
  c->restart.chunk_sizes = c->service.chunk_sizes;  // a takeover's geometry
  if (c->urls.empty() || c->host_or_port_given) {
    // ZMQ binds to an address or interface, not a host name.
    const std::string host = c->host == "localhost" ? "127.0.0.1" : c->host;
    router.urls.push_back("tcp://" + host + ":" + std::to_string(c->port));
  }
  LMC_ASSIGN_OR_RETURN(router.allowed_uids, ParseAllowedUids(c->allow_uids));
  router.affinity_workers = c->max_gpu_workers == 0 ? c->max_workers : c->max_gpu_workers;
  router.cpu_workers = c->max_cpu_workers == 0 ? c->max_workers : c->max_cpu_workers;
  if (c->max_client_queue_mb < 1 || c->max_queue_mb < c->max_client_queue_mb) {
    return InvalidConfig("--max-client-queue-mb must be >= 1 and <= --max-queue-mb");
  }
  router.queue_limits.client_bytes = c->max_client_queue_mb << 20;
  router.queue_limits.total_bytes = c->max_queue_mb << 20;

  server::ServiceConfig& service = c->service;
  service.instance_id = c->instance_id;
  LMC_RETURN_IF_ERROR(ParsePrefillRates(c->prefill_rates, &service.prefill_tokens_per_second));
  service.sessions.idle_ttl_ms = c->session_ttl_seconds * 1000;
  service.sessions.max_bytes = c->session_memory_mb << 20;
  service.hash_cache_bytes = c->hash_cache_mb << 20;
  service.worker_reap_timeout_ms = c->worker_reap_timeout_seconds * 1000;
  service.worker_registration_grace_ms = c->worker_registration_grace_seconds * 1000;
  if (c->session_memory_mb < 1) return InvalidConfig("--session-memory-mb must be >= 1");
  if (c->admin_ops == "any") {
    service.admin_access = server::AdminAccess::kAny;
  } else if (c->admin_ops == "local") {
    service.admin_access = server::AdminAccess::kLocal;
  } else if (c->admin_ops == "ipc") {
    service.admin_access = server::AdminAccess::kIpc;
  } else if (c->admin_ops == "off") {
    service.admin_access = server::AdminAccess::kOff;
  } else {
    return InvalidConfig("--admin-ops must be ipc, local, any or off, got '" + c->admin_ops + "'");
  }
  if (c->gpu_backend != "cuda" && c->gpu_backend != "emulated") {
    return InvalidConfig("--gpu-backend must be cuda or emulated, got '" + c->gpu_backend + "'");
  }
  if (c->gpu_event_timeout_ms < 1 || c->gpu_event_timeout_ms > 3'600'000) {
    return InvalidConfig("--gpu-event-timeout-ms must be in [1, 3600000]");
  }
  service.transfer_mode = c->supported_transfer_mode;
  service.gpu_backend = c->gpu_backend;
  service.gpu_event_timeout_ms = c->gpu_event_timeout_ms;
  return Status::Ok();
}

}  // namespace

double DefaultL1SizeGb() {
  const std::uint64_t quarter_gib = PhysicalMemoryBytes() / 4 / kGiB;
  return static_cast<double>(std::max<std::uint64_t>(quarter_gib, 1));
}

namespace {

Status FinalizeL2(ServerConfig* c) {
  tier::L2Config& l2 = c->l2;
  for (std::size_t i = 0; i < c->l2_adapters.size(); ++i) {
    LMC_ASSIGN_OR_RETURN(tier::L2AdapterSpec spec,
                         tier::ParseL2AdapterSpec(c->l2_adapters[i], static_cast<int>(i + 1)));
    l2.adapters.push_back(std::move(spec));
  }
  if (c->l2_store_policy == "default") {
    l2.store.policy = tier::StorePolicy::kDefault;
  } else if (c->l2_store_policy == "skip_l1") {
    l2.store.policy = tier::StorePolicy::kSkipL1;
  } else {
    return InvalidConfig("--l2-store-policy must be default or skip_l1, got '" +
                         c->l2_store_policy + "'");
  }
  if (c->l2_prefetch_policy != "default" && c->l2_prefetch_policy != "retain") {
    return InvalidConfig("--l2-prefetch-policy must be default or retain, got '" +
                         c->l2_prefetch_policy + "'");
  }
  if (c->l2_prefetch_max_in_flight < 1 || c->l2_prefetch_max_in_flight > 256) {
    return InvalidConfig("--l2-prefetch-max-in-flight must be in [1, 256]");
  }
  if (!(c->l2_prefetch_load_timeout >= 0) || c->l2_prefetch_load_timeout > 3600) {
    return InvalidConfig("--l2-prefetch-load-timeout must be in [0, 3600] seconds");
  }
  if (c->l2_store_workers < 1 || c->l2_store_workers > 64) {
    return InvalidConfig("--l2-store-workers must be in [1, 64]");
  }
  if (c->l2_store_queue_mb < 1) return InvalidConfig("--l2-store-queue-mb must be >= 1");
  if (c->l2_store_queue_objects < 1 || c->l2_store_queue_objects > (1u << 26)) {
    return InvalidConfig("--l2-store-queue-objects must be in [1, 67108864], got " +
                         std::to_string(c->l2_store_queue_objects));
  }
  l2.prefetch.max_in_flight = c->l2_prefetch_max_in_flight;
  l2.prefetch.load_timeout = std::chrono::milliseconds(
      static_cast<std::int64_t>(c->l2_prefetch_load_timeout * 1000));
  l2.store.workers = c->l2_store_workers;
  l2.store.max_queue_bytes = c->l2_store_queue_mb << 20;
  l2.store.max_queue_objects = c->l2_store_queue_objects;
  return Status::Ok();
}

}  // namespace

// Reads the HTTP admin token; refuses a token others could read or guess.
Status FinalizeHttpAdmin(ServerConfig* c) {
  if (c->http_admin_open && c->http_read_only) {
    return InvalidConfig("--http-admin-open and --http-read-only contradict each other; keep one");
  }
  if (c->http_admin_token_file.empty()) return Status::Ok();
  if (c->http_admin_open) {
    return InvalidConfig(
        "--http-admin-open turns the token of --http-admin-token-file off; keep one of them");
  }
  const std::string& path = c->http_admin_token_file;
  // Judged on the file as opened (fstat), not on a path that can be
  // swapped between a stat and an open.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return InvalidConfig("--http-admin-token-file " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return InvalidConfig("--http-admin-token-file " + path + " is not a regular file");
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return InvalidConfig("--http-admin-token-file " + path + " is owned by uid " +
                         std::to_string(st.st_uid) + ", who could choose the token: it must be "
                         "owned by this server's user (uid " + std::to_string(::geteuid()) +
                         ") or root");
  }
  if ((st.st_mode & 077) != 0) {
    return InvalidConfig("--http-admin-token-file " + path +
                         " is readable by group or others: chmod 600 " + path);
  }
  std::string content(4097 + 2, '\0');
  const ssize_t n = ::read(fd.get(), content.data(), content.size());
  content.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  std::string token = content.substr(0, content.find('\n'));
  if (token.empty()) {
    return InvalidConfig("--http-admin-token-file " + path + ": cannot read a token from it");
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.size() < 16 || token.size() > 4096 ||
      !std::all_of(token.begin(), token.end(), [](char ch) { return ch > ' ' && ch < 127; })) {
    return InvalidConfig("--http-admin-token-file " + path +
                         " must hold one token of 16 to 4096 printable characters (e.g. "
                         "`openssl rand -hex 32 > " +
                         path + "`)");
  }
  c->http_admin_token = std::move(token);
  return Status::Ok();
}

namespace {

Status FinalizeKvEvents(ServerConfig* c) {
  if (c->kv_event_log_size < 0) {
    return InvalidConfig("--kv-event-log-size must be >= 0 (0 turns KV events off), got " +
                         std::to_string(c->kv_event_log_size));
  }
  if (c->kv_event_log_size > 0 && c->kv_event_log_mb < 1) {
    return InvalidConfig("--kv-event-log-mb must be >= 1 while KV events are on");
  }
  c->events.log.max_events = static_cast<std::size_t>(c->kv_event_log_size);
  c->events.log.max_bytes = c->kv_event_log_mb << 20;
  c->events.token_binding_bytes = c->kv_event_token_cache_mb << 20;
  // A publisher reads from startup; otherwise recording waits for the first poll.
  c->events.record_from_start = !c->kv_events_url.empty();
  if (c->kv_events_url.empty()) {
    if (!c->kv_events_replay_url.empty()) {
      return InvalidConfig("--kv-events-replay-url needs --kv-events-url");
    }
    return Status::Ok();
  }
  if (c->kv_event_log_size == 0) {
    return InvalidConfig("--kv-events-url publishes the KV event log: --kv-event-log-size must "
                         "be > 0");
  }
  events::VllmPublisherConfig& publisher = c->kv_publisher.emplace();
  publisher.endpoint = c->kv_events_url;
  publisher.replay_endpoint = c->kv_events_replay_url;
  publisher.topic = c->kv_events_topic;
  if (c->kv_events_hash_format == "int") {
    publisher.batch.hashes = events::VllmHashFormat::kInt64;
  } else if (c->kv_events_hash_format == "bytes") {
    publisher.batch.hashes = events::VllmHashFormat::kBytes;
  } else {
    return InvalidConfig("--kv-events-hash-format must be int or bytes, got '" +
                         c->kv_events_hash_format + "'");
  }
  return Status::Ok();
}

}  // namespace

namespace {

Status FinalizeTakeover(ServerConfig* c) {
  if (c->takeover != "off" && c->takeover != "on" && c->takeover != "if-compatible") {
    return InvalidConfig("--takeover: '" + c->takeover + "' is not on, off or if-compatible");
  }
  if (c->after_handover != "exit" && c->after_handover != "wait") {
    return InvalidConfig("--after-handover: '" + c->after_handover + "' is neither exit nor wait");
  }
  if (!(c->takeover_timeout_seconds > 0) || c->takeover_timeout_seconds > 86400) {
    return InvalidConfig("--takeover-timeout-seconds must be in (0, 86400]");
  }
  restart::RestartConfig& r = c->restart;
  r.takeover = c->takeover == "on"            ? restart::TakeoverMode::kOn
               : c->takeover == "if-compatible" ? restart::TakeoverMode::kIfCompatible
                                                : restart::TakeoverMode::kOff;
  r.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(c->takeover_timeout_seconds * 1000));
  r.recover_pool = c->recover_pool;
  c->restart.shm_name_given = !c->shm_name.empty();
  if (c->recover_pool && !c->restart.shm_name_given) {
    return InvalidConfig("--recover-pool without --shm-name: the default pool name holds the "
                         "server's pid, which a restarted server cannot know; give --shm-name");
  }
  if (c->takeover_socket == "off") {
    if (c->takeover != "off") {
      return InvalidConfig("--takeover needs a takeover socket: drop --takeover-socket off");
    }
    c->restart.socket_path.clear();
  } else if (c->takeover_socket == "auto") {
    if (c->takeover != "off" && !c->restart.shm_name_given) {
      return InvalidConfig("--takeover without --shm-name: give the running server's --shm-name, "
                           "or its --takeover-socket");
    }
    c->restart.socket_path = c->shm_dir + "/.lmcache-takeover-" + c->l1.shm_name;
  } else {
    c->restart.socket_path = c->takeover_socket;
  }
  if (c->restart.socket_path.size() >= 108) {
    return InvalidConfig("--takeover-socket: '" + c->restart.socket_path +
                         "' is longer than a unix socket path may be (107 characters); give a "
                         "shorter one");
  }
  return Status::Ok();
}

}  // namespace

namespace {

// Every address this configuration binds, with the flag that names it.
std::vector<NamedEndpoint> EndpointsOf(const ServerConfig& c) {
  std::vector<NamedEndpoint> out;
  for (const std::string& url : c.router.urls) {
    const bool given = std::find(c.urls.begin(), c.urls.end(), url) != c.urls.end();
    out.push_back({given ? "--url" : "--host/--port", url});
  }
  for (const auto& endpoint : c.router.model_urls) out.push_back({"--model-url", endpoint.url});
  if (!c.kv_events_url.empty()) out.push_back({"--kv-events-url", c.kv_events_url});
  if (!c.kv_events_replay_url.empty()) {
    out.push_back({"--kv-events-replay-url", c.kv_events_replay_url});
  }
  if (c.http_port != 0) {
    out.push_back(
        {"--http-host/--http-port", "tcp://" + c.http_host + ":" + std::to_string(c.http_port)});
  }
  if (!c.restart.socket_path.empty()) {
    out.push_back({"--takeover-socket", "unix:" + c.restart.socket_path});
  }
  if (c.p2p.enabled()) out.push_back({"--p2p-listen-url", c.p2p.fleet_endpoint});
  return out;
}

}  // namespace

namespace {

Status ParseQuotas(const std::vector<std::string>& given, store::QuotaMode mode,
                   std::vector<std::pair<std::string, std::uint64_t>>* quotas) {
  for (const std::string& item : given) {
    const std::size_t eq = item.rfind('=');
    if (eq == std::string::npos) {
      return InvalidConfig("--quota '" + item + "': expected SALT=GB, for example tenant-a=2.5");
    }
    const std::string salt = item.substr(0, eq) == store::kDefaultSaltName ? "" : item.substr(0, eq);
    const Status valid = store::ValidateCacheSalt(salt);
    const auto bytes = store::QuotaBytesFromGb(std::string_view(item).substr(eq + 1));
    if (!valid.ok() || !bytes.ok()) {
      return InvalidConfig("--quota '" + item + "': " +
                           (valid.ok() ? bytes.status() : valid).message());
    }
    quotas->emplace_back(salt, *bytes);
  }
  if (!quotas->empty() && mode == store::QuotaMode::kOff) {
    return InvalidConfig("--quota needs quotas on: drop --quota-mode off, or the --quota flags");
  }
  return Status::Ok();
}

}  // namespace

Status Finalize(ServerConfig* c, pid_t pid) {
  if (c->l1_size_gb == 0) c->l1_size_gb = DefaultL1SizeGb();
  if (!(c->l1_size_gb > 0) || !std::isfinite(c->l1_size_gb)) {
    return InvalidConfig("--l1-size-gb must be a positive number of GiB");
  }
  if (c->l1_size_gb > 1e9) return InvalidConfig("--l1-size-gb is beyond any machine");
  if (c->l1_write_ttl_seconds <= 0) {
    return InvalidConfig("--l1-write-ttl-seconds must be > 0 (a 0 lease would expire every write)");
  }
  if (c->l1_read_ttl_seconds <= 0) {
    return InvalidConfig("--l1-read-ttl-seconds must be > 0 (a 0 lease would expire every read)");
  }
  LMC_RETURN_IF_ERROR(ParseLogFormat(c->log_format).status());
  if (c->http_port < 0 || c->http_port > 65535) {
    return InvalidConfig("--http-port must be in [0, 65535] (0 = no HTTP), got " +
                         std::to_string(c->http_port));
  }
  LMC_RETURN_IF_ERROR(FinalizeHttpAdmin(c));
  if (!(c->drain_timeout_seconds >= 0) || c->drain_timeout_seconds > 86400) {
    return InvalidConfig("--drain-timeout-seconds must be in [0, 86400]");
  }
  if (!(c->ready_prefault_fraction >= 0 && c->ready_prefault_fraction <= 1)) {
    return InvalidConfig("--ready-prefault-fraction must be in [0, 1]");
  }
  if (!IsValidLogLevel(c->log_level)) {
    return InvalidConfig("--log-level: unknown level '" + c->log_level + "'");
  }
  LMC_ASSIGN_OR_RETURN(c->l1.shm_name, shm::NormalizePoolName(c->shm_name, pid));
  LMC_RETURN_IF_ERROR(FinalizeTakeover(c));
  LMC_RETURN_IF_ERROR(FinalizeTransport(c));
  LMC_RETURN_IF_ERROR(FinalizeL2(c));
  LMC_RETURN_IF_ERROR(FinalizeKvEvents(c));
  LMC_RETURN_IF_ERROR(FinalizeP2p(c));
  LMC_RETURN_IF_ERROR(RefuseSharedEndpoints(EndpointsOf(*c)));

  store::L1Config& l1 = c->l1;
  l1.size_bytes = static_cast<std::uint64_t>(c->l1_size_gb * static_cast<double>(kGiB));
  l1.size_bytes = l1.size_bytes / 4096 * 4096;
  if (l1.size_bytes == 0) return InvalidConfig("--l1-size-gb is smaller than one page");
  l1.shm_dir = c->shm_dir;
  l1.prefault_threads = c->prefault_threads;
  LMC_ASSIGN_OR_RETURN(l1.huge_pages, shm::ParseHugePageMode(c->l1_hugepages));
  l1.eviction_policy = c->eviction_policy;
  l1.allocator.align_bytes = c->l1_align_bytes;
  l1.allocator.page_bytes = std::max<std::uint64_t>(l1.allocator.page_bytes, c->l1_align_bytes);
  l1.table.write_ttl_ms = c->l1_write_ttl_seconds * 1000;
  l1.table.read_ttl_ms = c->l1_read_ttl_seconds * 1000;
  l1.table.on_demand_eviction = c->on_demand_eviction;
  LMC_ASSIGN_OR_RETURN(l1.table.quota_mode, store::ParseQuotaMode(c->quota_mode));
  LMC_RETURN_IF_ERROR(ParseQuotas(c->quotas, l1.table.quota_mode, &l1.quotas));
  if (!(c->max_pinned_fraction >= 0 && c->max_pinned_fraction < 1)) {
    return InvalidConfig("--max-pinned-fraction must be in [0, 1): pinned objects cannot take "
                         "the whole pool (0 turns pins off)");
  }
  l1.table.max_pinned_fraction = c->max_pinned_fraction;
  l1.evictor.trigger_watermark = c->eviction_trigger_watermark;
  l1.evictor.eviction_ratio = c->eviction_ratio;
  l1.evictor.interval_ms = c->eviction_interval_ms;
  LMC_RETURN_IF_ERROR(store::ValidateEvictorConfig(l1.evictor));
  LMC_RETURN_IF_ERROR(store::MakeEvictionPolicy(c->eviction_policy).status());
  if (c->l1_align_bytes < 64 || (c->l1_align_bytes & (c->l1_align_bytes - 1)) != 0) {
    return InvalidConfig("--l1-align-bytes must be a power of two >= 64, got " +
                         std::to_string(c->l1_align_bytes));
  }
  return Status::Ok();
}


}  // namespace lmcache::daemon
