#include "daemon/config.h"

#include <gtest/gtest.h>

#include <map>

#include <set>

#include "fakes/parse_flags.h"

namespace lmcache::daemon {
namespace {

Result<ServerConfig> Parse(std::vector<std::string> args) {
  return testing::ParseServerFlags(std::move(args), 4242);
}

TEST(ServerConfig, DefaultsMatchTheReference) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->l1.shm_name, "lmcache_l1_pool_4242");
  EXPECT_EQ(config->l1.table.write_ttl_ms, 600'000);
  EXPECT_EQ(config->l1.table.read_ttl_ms, 300'000);
  EXPECT_EQ(config->l1.evictor.trigger_watermark, 0.8);
  EXPECT_EQ(config->l1.evictor.eviction_ratio, 0.2);
  EXPECT_EQ(config->l1.allocator.align_bytes, 4096u);
  EXPECT_TRUE(config->l1.table.on_demand_eviction);
  EXPECT_EQ(config->l1.size_bytes, static_cast<std::uint64_t>(DefaultL1SizeGb()) << 30);
  EXPECT_GE(DefaultL1SizeGb(), 1.0);
}

TEST(ServerConfig, FlagsAreApplied) {
  auto config =
      Parse({"--l1-size-gb", "1.5", "--shm-name", "/pool", "--l1-write-ttl-seconds", "30",
             "--eviction-policy", "noop", "--no-on-demand-eviction", "--l1-align-bytes", "65536"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->l1.size_bytes, 3ull << 29);
  EXPECT_EQ(config->l1.shm_name, "lmcache_l1_pool_pool");
  EXPECT_EQ(config->l1.table.write_ttl_ms, 30'000);
  EXPECT_EQ(config->l1.eviction_policy, "noop");
  EXPECT_FALSE(config->l1.table.on_demand_eviction);
  EXPECT_EQ(config->l1.allocator.align_bytes, 65536u);
  // Chunk size 1 (SGLang's one chunk per page) queues a prompt's 131072
  // objects for L2 at once: the count bound must be settable.
  auto l2 = Parse({"--l2-store-queue-objects", "1048576", "--l2-store-queue-mb", "2048"});
  ASSERT_TRUE(l2.ok()) << l2.status().ToString();
  EXPECT_EQ(l2->l2.store.max_queue_objects, 1u << 20);
  EXPECT_EQ(l2->l2.store.max_queue_bytes, 2048ull << 20);
  EXPECT_EQ(Parse({})->l2.store.max_queue_objects, 65536u);
  auto gpu = Parse({"--gpu-backend", "emulated", "--gpu-event-timeout-ms", "250"});
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ(gpu->service.gpu_backend, "emulated");
  EXPECT_EQ(gpu->service.gpu_event_timeout_ms, 250);
}

void ExpectRejected(std::vector<std::string> args, const std::string& flag) {
  auto config = Parse(args);
  ASSERT_FALSE(config.ok()) << "accepted: " << args[0];
  EXPECT_NE(config.status().message().find(flag), std::string::npos) << config.status().message();
}

// --allow-uids: by default only the server's own user may use a tcp
// endpoint from this host (an empty set); uids and user names add users;
// "all" admits every local user (nullopt).
TEST(ServerConfig, AllowUidsNamesTheLocalUsersBesidesTheServersOwn) {
  auto defaults = Parse({});
  ASSERT_TRUE(defaults.ok());
  ASSERT_TRUE(defaults->router.allowed_uids.has_value());
  EXPECT_TRUE(defaults->router.allowed_uids->empty());
  auto named = Parse({"--allow-uids", "1000,nobody,,0"});
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(*named->router.allowed_uids, (std::set<uid_t>{0, 1000, 65534}));
  auto all = Parse({"--allow-uids", "all"});
  ASSERT_TRUE(all.ok());
  EXPECT_FALSE(all->router.allowed_uids.has_value());
  ExpectRejected({"--allow-uids", "no-such-user-here"}, "--allow-uids");
  ExpectRejected({"--allow-uids", "99999999999"}, "--allow-uids");
}

TEST(ServerConfig, InvalidValuesNameTheFlag) {
  ExpectRejected({"--eviction-trigger-watermark", "0"}, "--eviction-trigger-watermark");
  ExpectRejected({"--eviction-trigger-watermark", "1.01"}, "--eviction-trigger-watermark");
  ExpectRejected({"--eviction-ratio", "0"}, "--eviction-ratio");
  ExpectRejected({"--l1-read-ttl-seconds", "0"}, "--l1-read-ttl-seconds");
  ExpectRejected({"--l1-write-ttl-seconds", "-5"}, "--l1-write-ttl-seconds");
  ExpectRejected({"--eviction-policy", "ARC"}, "--eviction-policy");
  ExpectRejected({"--l1-align-bytes", "1000"}, "--l1-align-bytes");
  ExpectRejected({"--l1-size-gb", "-1"}, "--l1-size-gb");
  ExpectRejected({"--shm-name", "a/b"}, "--shm-name");
  ExpectRejected({"--log-level", "loud"}, "--log-level");
  ExpectRejected({"--eviction-interval-ms", "0"}, "--eviction-interval-ms");
  ExpectRejected({"--chunk-size", "0"}, "--chunk-size");
  ExpectRejected({"--worker-reap-timeout-seconds", "10"}, "--worker-reap-timeout-seconds");
  ExpectRejected(
      {"--worker-reap-timeout-seconds", "300", "--worker-registration-grace-seconds", "100"},
      "--worker-registration-grace-seconds");
  ExpectRejected({"--session-ttl-seconds", "0"}, "--session-ttl-seconds");
  ExpectRejected({"--hash-algorithm", "sha256_cbor"}, "--hash-algorithm");
  ExpectRejected({"--url", "http://x"}, "--url");
  ExpectRejected({"--max-workers", "0"}, "--max-workers");
  ExpectRejected({"--gpu-backend", "rocm"}, "--gpu-backend");
  ExpectRejected({"--gpu-event-timeout-ms", "0"}, "--gpu-event-timeout-ms");
  ExpectRejected({"--l2-store-queue-objects", "0"}, "--l2-store-queue-objects");
  ExpectRejected({"--l2-store-queue-objects", "100000000"}, "--l2-store-queue-objects");
  ExpectRejected({"--max-pinned-fraction", "1"}, "--max-pinned-fraction");
  ExpectRejected({"--max-pinned-fraction", "-0.1"}, "--max-pinned-fraction");
  ExpectRejected({"--quota-mode", "soft"}, "--quota-mode");
  ExpectRejected({"--quota", "a=x"}, "--quota");
  ExpectRejected({"--quota", "a@b=1"}, "--quota");
}

TEST(ServerConfig, QuotasAndPinsReachTheTable) {
  auto config = Parse({"--quota-mode", "allowlist", "--quota", "_default=0.5", "--quota",
                       "tenant=2", "--max-pinned-fraction", "0.25"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->l1.table.quota_mode, store::QuotaMode::kAllowlist);
  EXPECT_EQ(config->l1.table.max_pinned_fraction, 0.25);
  ASSERT_EQ(config->l1.quotas.size(), 2u);
  EXPECT_EQ(config->l1.quotas[0], (std::pair<std::string, std::uint64_t>("", 1ull << 29)));
  EXPECT_EQ(config->l1.quotas[1], (std::pair<std::string, std::uint64_t>("tenant", 2ull << 30)));
  EXPECT_EQ(Parse({})->l1.table.quota_mode, store::QuotaMode::kOpen);
}

// Warm restart: every server listens for a successor on a socket named after
// its pool; --takeover needs to know which server it follows.
TEST(ServerConfig, TakeoverFlagsAndTheSocketTheyName) {
  auto plain = Parse({"--shm-name", "node"});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->takeover, "off");
  EXPECT_EQ(plain->restart.takeover, restart::TakeoverMode::kOff);
  EXPECT_EQ(plain->restart.timeout, std::chrono::seconds(120));
  EXPECT_EQ(plain->restart.socket_path, "/dev/shm/.lmcache-takeover-lmcache_l1_pool_node");
  EXPECT_TRUE(plain->restart.shm_name_given);
  auto on = Parse({"--shm-name", "node", "--takeover"});
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_EQ(on->takeover, "on");
  EXPECT_EQ(on->restart.takeover, restart::TakeoverMode::kOn);
  auto cold = Parse({"--shm-name", "node", "--takeover=if-compatible"});
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  EXPECT_EQ(cold->takeover, "if-compatible");
  EXPECT_EQ(cold->restart.takeover, restart::TakeoverMode::kIfCompatible);
  auto named = Parse({"--takeover", "--takeover-socket", "/run/lmcache/takeover.sock"});
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->restart.socket_path, "/run/lmcache/takeover.sock");
  EXPECT_FALSE(named->restart.shm_name_given);
  auto off = Parse({"--takeover-socket", "off"});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->restart.socket_path, "");
  ExpectRejected({"--takeover=maybe"}, "--takeover");
  ExpectRejected({"--takeover"}, "--shm-name");  // whose pool? the default name is per pid
  ExpectRejected({"--takeover", "--takeover-socket", "off"}, "--takeover");
  ExpectRejected({"--takeover-socket", "/" + std::string(120, 'x')}, "--takeover-socket");
  ExpectRejected({"--takeover-timeout-seconds", "0"}, "--takeover-timeout-seconds");
  ExpectRejected({"--after-handover", "linger"}, "--after-handover");
  EXPECT_EQ(Parse({"--after-handover", "wait"})->after_handover, "wait");
}

// Crash recovery: the journal is kept only with --recover-pool, and a
// restarted server can find its predecessor's pool only by a fixed name.
TEST(ServerConfig, RecoverPoolKeepsAJournalAndNeedsAFixedPoolName) {
  auto plain = Parse({"--shm-name", "node"});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->restart.recover_pool);
  auto on = Parse({"--shm-name", "node", "--recover-pool"});
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->restart.recover_pool);
  EXPECT_EQ(on->restart.chunk_sizes, store::ChunkSizes(256));
  ExpectRejected({"--recover-pool"}, "--shm-name");
}

TEST(ServerConfig, EndpointsFollowTheReferenceSpelling) {
  auto plain = Parse({});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->router.urls, std::vector<std::string>{"tcp://127.0.0.1:5555"});
  auto host_port = Parse({"--host", "localhost", "--port", "6000"});
  ASSERT_TRUE(host_port.ok());
  EXPECT_EQ(host_port->router.urls, std::vector<std::string>{"tcp://127.0.0.1:6000"});
  auto ipc_only = Parse({"--url", "ipc:///tmp/a.sock"});
  ASSERT_TRUE(ipc_only.ok());
  EXPECT_EQ(ipc_only->router.urls, std::vector<std::string>{"ipc:///tmp/a.sock"});
  auto both = Parse({"--url", "ipc:///tmp/a.sock", "--port", "7000"});
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->router.urls,
            (std::vector<std::string>{"ipc:///tmp/a.sock", "tcp://127.0.0.1:7000"}));
}

// Two endpoints of one server on one address: before, the kv-events PUB
// socket and the request ROUTER both bound one ipc path and every client hung.
TEST(ServerConfig, TwoEndpointsOnOneAddressAreRefusedNamingBothFlags) {
  auto refused = Parse({"--url", "ipc:///tmp/lmc_dup/events.sock", "--kv-events-url",
                        "ipc:///tmp/lmc_dup/events.sock"});
  ASSERT_FALSE(refused.ok());
  const std::string why = refused.status().message();
  EXPECT_NE(why.find("--url and --kv-events-url"), std::string::npos) << why;
  EXPECT_NE(why.find("/tmp/lmc_dup/events.sock"), std::string::npos) << why;
  ExpectRejected({"--url", "ipc:///tmp/a.sock", "--url", "ipc:///tmp/./a.sock"}, "--url");
  ExpectRejected({"--port", "8080"}, "--http-host/--http-port");  // the HTTP default
  ExpectRejected({"--kv-events-url", "tcp://*:5555"}, "--host/--port and --kv-events-url");
  ExpectRejected({"--kv-events-url", "tcp://127.0.0.1:6000", "--kv-events-replay-url",
                  "tcp://0.0.0.0:6000"},
                 "--kv-events-url and --kv-events-replay-url");
  ExpectRejected({"--shm-name", "node", "--url", "ipc:///dev/shm/.lmcache-takeover-lmcache_l1_pool_node"},
                 "--takeover-socket");
  // Distinct addresses, and ports the kernel picks, are fine.
  auto fine = Parse({"--url", "ipc:///tmp/a.sock", "--kv-events-url", "ipc:///tmp/b.sock",
                     "--kv-events-replay-url", "tcp://127.0.0.1:0", "--port", "0",
                     "--http-port", "0"});
  EXPECT_TRUE(fine.ok()) << fine.status().ToString();
  auto other_hosts = Parse({"--port", "7000", "--kv-events-url", "tcp://127.0.0.2:7000"});
  EXPECT_TRUE(other_hosts.ok()) << other_hosts.status().ToString();
}

TEST(ServerConfig, ReferenceCommandLinesStillParse) {
  auto config =
      Parse({"--l1-size-gb", "2", "--no-l1-use-lazy", "--eviction-policy", "LRU",
             "--supported-transfer-mode", "engine_driven", "--engine-type", "default",
             "--instance-id", "node-7", "--max-workers", "4", "--kv-load-policy", "DEFAULT"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(config->notices.empty());
  auto lazy = Parse({"--l1-use-lazy", "--l1-init-size-gb", "20"});
  ASSERT_TRUE(lazy.ok());
  EXPECT_EQ(lazy->notices.size(), 2u);  // accepted, and the operator is told they do nothing
  ExpectRejected({"--engine-type", "blend"}, "--engine-type");
  // A reference policy plugin is Python: refused, naming the flag and the way out.
  ExpectRejected({"--kv-load-policy", "my_pkg.policies:ShortPromptsRecompute"},
                 "use DEFAULT, and lmcache.skip_load per request");
  ExpectRejected({"--supported-transfer-mode", "pickle"}, "--supported-transfer-mode");
}

// The load-or-recompute policy's rates: MODEL=RATE, "*" for every other model.
TEST(ServerConfig, PrefillRatesAreModelEqualsTokensPerSecond) {
  auto config = Parse({"--prefill-tokens-per-second", "meta-llama/Llama-3.1-8B=12000",
                       "--prefill-tokens-per-second", "*=2.5e3"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->service.prefill_tokens_per_second,
            (std::map<std::string, double>{{"meta-llama/Llama-3.1-8B", 12000}, {"*", 2500}}));
  auto none = Parse({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->service.prefill_tokens_per_second.empty());  // off by default
  for (const char* bad : {"model", "=100", "model=", "model=0", "model=-5", "model=fast",
                          "model=inf", "model=100x"}) {
    ExpectRejected({"--prefill-tokens-per-second", bad}, "--prefill-tokens-per-second");
  }
  ExpectRejected({"--prefill-tokens-per-second", "m=1", "--prefill-tokens-per-second", "m=2"},
                 "twice");
}

// --model-chunk-size gives models their own chunk size (the default the
// minimum); --model-url binds an endpoint per model, which must have one.
TEST(ServerConfig, ModelChunkSizesAndTheirEndpoints) {
  auto config = Parse({"--chunk-size", "128", "--model-chunk-size", "zai-org/GLM-5.3-Flash=640",
                       "--model-chunk-size", "a=b=544", "--model-chunk-size", "c=640",
                       "--model-url", "zai-org/GLM-5.3-Flash=ipc:///tmp/lmc-glm.sock",
                       "--model-url", "a=b=ipc:///tmp/lmc-ab.sock"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const store::ChunkSizes& sizes = config->service.chunk_sizes;
  EXPECT_EQ(sizes.For("zai-org/GLM-5.3-Flash"), 640);
  EXPECT_EQ(sizes.For("a=b"), 544);  // the last '=' splits
  EXPECT_EQ(sizes.For("any other model"), 128);
  EXPECT_EQ(config->restart.chunk_sizes, sizes);  // what a takeover compares
  // c has no endpoint of its own: the GLM model's answers its size.
  EXPECT_TRUE(sizes.CheckServedAt("zai-org/GLM-5.3-Flash", "c").ok());
  ASSERT_EQ(config->router.model_urls.size(), 2u);
  EXPECT_EQ(config->router.model_urls[0].model, "zai-org/GLM-5.3-Flash");
  EXPECT_EQ(config->router.model_urls[0].url, "ipc:///tmp/lmc-glm.sock");

  ExpectRejected({"--model-chunk-size", "m=100"}, "below --chunk-size (256)");
  ExpectRejected({"--model-chunk-size", "m=256", "--model-url", "m=tcp://127.0.0.1:5596"},
                 "every model's size already");
  // A model whose size no endpoint answers could never be served.
  ExpectRejected({"--model-chunk-size", "m=640"}, "no endpoint answers get_chunk_size with 640");
  ExpectRejected({"--model-chunk-size", "m=640", "--model-chunk-size", "n=512", "--model-url",
                  "m=tcp://127.0.0.1:5596"},
                 "--model-chunk-size n=512: no endpoint");
  // Its endpoint's address is another endpoint's.
  ExpectRejected({"--url", "tcp://127.0.0.1:5595", "--model-chunk-size", "m=640", "--model-url",
                  "m=tcp://127.0.0.1:5595"},
                 "--model-url");
  ExpectRejected({"--model-chunk-size", "m=0", "--chunk-size", "1"}, "must be in [1, 1048576]");
  ExpectRejected({"--model-chunk-size", "m=2097152"}, "must be in [1, 1048576]");
  ExpectRejected({"--model-chunk-size", "m=640", "--model-chunk-size", "m=1280"}, "named twice");
  ExpectRejected({"--model-chunk-size", "m=6x"}, "not a number of tokens");
  ExpectRejected({"--model-chunk-size", "=640"}, "MODEL=TOKENS");
  ExpectRejected({"--model-chunk-size", "640"}, "MODEL=TOKENS");
  ExpectRejected({"--model-url", "m=tcp://127.0.0.1:5599"}, "has no --model-chunk-size");
  ExpectRejected({"--model-chunk-size", "m=640", "--model-url", "m=http://x"}, "tcp:// or ipc://");
  ExpectRejected({"--model-chunk-size", "m=640", "--model-url", "m=tcp://127.0.0.1:5598",
                  "--model-url", "m=tcp://127.0.0.1:5597"},
                 "named twice");
}

TEST(ServerConfig, WorkerPoolsDefaultToMaxWorkers) {
  auto config = Parse({"--max-workers", "3", "--max-cpu-workers", "5"});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->router.affinity_workers, 3u);
  EXPECT_EQ(config->router.cpu_workers, 5u);
  EXPECT_EQ(config->service.chunk_sizes, store::ChunkSizes(256));
  EXPECT_EQ(config->service.worker_reap_timeout_ms, 120'000);
  EXPECT_EQ(config->service.worker_registration_grace_ms, 3'600'000);
  auto no_reaper = Parse({"--worker-reap-timeout-seconds", "0"});
  ASSERT_TRUE(no_reaper.ok());
  EXPECT_EQ(no_reaper->service.worker_reap_timeout_ms, 0);
}

}  // namespace
}  // namespace lmcache::daemon
