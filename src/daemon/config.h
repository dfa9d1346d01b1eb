// ServerConfig: every command-line flag of lmcache-server, its default and its
// validation. It lives in the composition root (daemon/, above every layer it
// configures): the layers below take their own config structs (L1Config,
// L2Config, ServiceConfig, RouterConfig, RestartConfig, HttpConfig) and know
// no flags.
//
// AddFlags() registers the flags with CLI11 (so --help documents each one with
// units and default); Finalize() fills machine-dependent defaults and checks
// the whole configuration, returning an error that names the flag to change.
// Thread-safety: plain data; build it on the main thread before starting others.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "common/flag_values.h"
#include "events/kv_events.h"
#include "daemon/p2p_config.h"
#include "events/vllm_publisher.h"
#include "lmcache/status.h"
#include "restart/open_pool.h"
#include "transport/router_loop.h"
#include "server/service.h"
#include "store/l1_cache.h"
#include "tier/l2_config.h"

namespace lmcache::daemon {

struct ServerConfig {
  // Transport and request handling (reference spec 15.2).
  std::vector<std::string> urls;  // --url, repeatable
  std::vector<std::string> model_urls;         // --model-url MODEL=URL, repeatable
  std::vector<std::string> model_chunk_sizes;  // --model-chunk-size MODEL=TOKENS, repeatable
  std::string host = "127.0.0.1";
  std::uint16_t port = 5555;
  std::string allow_uids;  // --allow-uids as given: uids or user names, or "all"
  // Every flag's effective value, secrets masked (GET /config; main fills it
  // from the parsed command line).
  std::vector<FlagValue> effective_flags;
  std::int64_t chunk_size = 256;
  unsigned max_workers = 1;
  unsigned max_gpu_workers = 0;  // 0 = max_workers
  unsigned max_cpu_workers = 0;  // 0 = max_workers
  std::int64_t worker_reap_timeout_seconds = 120;
  std::int64_t worker_registration_grace_seconds = 3600;
  std::int64_t session_ttl_seconds = 600;
  std::uint64_t session_memory_mb = 256;
  std::uint64_t hash_cache_mb = 64;
  std::string admin_ops = "ipc";
  std::string gpu_backend = "cuda";            // --gpu-backend: cuda or emulated
  std::int64_t gpu_event_timeout_ms = 10'000;  // --gpu-event-timeout-ms (emulated backend)
  std::uint64_t max_client_queue_mb = 64;
  std::uint64_t max_queue_mb = 512;
  std::string hash_algorithm = "blake3";
  // Reference flags accepted so existing command lines keep working (15.2, 15.3).
  std::string engine_type = "default";
  std::string kv_load_policy = "DEFAULT";  // the reference's --kv-load-policy
  std::vector<std::string> prefill_rates;  // --prefill-tokens-per-second MODEL=RATE
  std::string supported_transfer_mode = "auto";
  std::string instance_id;
  bool l1_use_lazy = false;
  double l1_init_size_gb = 0;
  // L1 (reference spec 15.3).
  double l1_size_gb = 0;  // 0 = machine default (see DefaultL1SizeGb)
  std::string shm_name;   // "" = lmcache_l1_pool_<pid>
  std::uint64_t l1_align_bytes = 4096;
  std::int64_t l1_write_ttl_seconds = 600;
  std::int64_t l1_read_ttl_seconds = 300;
  std::string eviction_policy = "LRU";
  std::string quota_mode = "on";    // --quota-mode: on, allowlist or off
  std::vector<std::string> quotas;  // --quota SALT=GB, repeated
  double max_pinned_fraction = 0.5;  // --max-pinned-fraction
  double eviction_trigger_watermark = 0.8;
  double eviction_ratio = 0.2;
  std::uint32_t eviction_interval_ms = 1000;
  bool on_demand_eviction = true;
  unsigned prefault_threads = 0;
  std::string log_level = "info";
  std::string log_format = "text";  // text or json
  std::string log_file;             // empty: stderr
  // Operator surface (HTTP, drain, readiness).
  std::string http_host = "127.0.0.1";
  int http_port = 8080;  // 0 = no HTTP
  bool http_read_only = false;
  // Mutating HTTP routes (/clear-cache, PUT /loglevel): off unless a token
  // file or --http-admin-open turns them on.
  std::string http_admin_token_file;
  std::string http_admin_token;  // read from the file by Finalize
  bool http_admin_open = false;
  std::string l2_fs_root;  // --l2-fs-root: where runtime fs adapters may live ("" = none)
  double drain_timeout_seconds = 30;
  // Warm restart (docs/architecture.md, "Restarts and upgrades").
  std::string takeover = "off";          // off | on | if-compatible
  std::string takeover_socket = "auto";  // auto: <shm dir>/.lmcache-takeover-<pool name>; off
  double takeover_timeout_seconds = 120;
  bool recover_pool = false;  // journal the pool; adopt a crashed predecessor's at start
  std::string after_handover = "exit";  // exit | wait (for SIGTERM: a pod its controller deletes)
  double ready_prefault_fraction = 0;
  std::string shm_dir = "/dev/shm";
  std::string l1_hugepages = "auto";  // auto | on | off (shm/huge_pages.h)
  // L2 (reference spec 13.4, 15.3).
  std::vector<std::string> l2_adapters;  // --l2-adapter JSON, repeatable, in cascade order
  std::string l2_store_policy = "default";
  std::string l2_prefetch_policy = "default";
  unsigned l2_prefetch_max_in_flight = 8;
  double l2_prefetch_load_timeout = 30;  // seconds; 0 = none
  unsigned l2_store_workers = 2;
  std::uint64_t l2_store_queue_mb = 4096;
  std::uint64_t l2_store_queue_objects = 65536;
  std::uint32_t periodic_notifier_interval_ms = 5;  // accepted; no polling here
  // KV events (the reference's --kv-event-log-size; the rest are ours).
  std::int64_t kv_event_log_size = 32768;  // records; 0 turns the channel off
  std::uint64_t kv_event_log_mb = 64;
  std::uint64_t kv_event_token_cache_mb = 64;
  std::string kv_events_url;         // vLLM-format PUB endpoint; "" = none
  std::string kv_events_replay_url;  // its replay ROUTER endpoint; "" = none
  std::string kv_events_topic;
  std::string kv_events_hash_format = "int";  // int | bytes
  P2pFlags p2p;  // cross-node sharing (daemon/p2p_config.h)

  // Filled by Finalize().
  restart::RestartConfig restart;  // how the pool is opened and handed over
  store::L1Config l1;
  tier::L2Config l2;
  server::ServiceConfig service;
  transport::RouterConfig router;
  events::KvEventsConfig events;
  std::optional<events::VllmPublisherConfig> kv_publisher;  // with --kv-events-url
  bool host_or_port_given = false;
  // What Finalize() wants the operator told (flags accepted but without effect).
  std::vector<std::string> notices;
};

void AddFlags(CLI::App& app, ServerConfig* config);

// The default pool size in GiB: a quarter of physical memory, in whole GiB, at
// least 1. A quarter leaves the rest to the inference engine (its own pinned
// buffers and host memory) and to the page cache.
double DefaultL1SizeGb();

// Applies defaults, validates, and derives `l1`. `pid` names the default segment.
Status Finalize(ServerConfig* config, pid_t pid);

}  // namespace lmcache::daemon
