// The HTTP surface of the real binary: every route, read-only mode, 503 while
// pre-faulting below the ready fraction and while draining, the drain on
// SIGTERM and the immediate exit on a second signal, JSON logs and SIGHUP.
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/version.h"
#include "fakes/free_port.h"
#include "fakes/server_process.h"
#include "lmcache/client.h"

namespace lmcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ServerProcess;

using testing::FreeTcpPort;

std::string Socket(const std::string& tag) {
  return "ipc://" + (fs::temp_directory_path() /
                     ("lmc_http_test_" + std::to_string(::getpid()) + "_" + tag + ".sock"))
                        .string();
}

std::unique_ptr<client::Client> Registered(const std::string& url, std::int64_t id) {
  client::ClientOptions options;
  options.url = url;
  auto c = client::Client::Connect(options);
  EXPECT_TRUE(c.ok());
  client::EngineContext context;
  context.instance_id = id;
  context.model_name = "http-test-model";
  context.num_layers = 2;
  context.hidden_dim_size = 64;
  auto registered = (*c)->Register(context);
  EXPECT_TRUE(registered.ok()) << registered.status().ToString();
  return std::move(c).value();
}

// Stores one 256-token chunk (tokens first_token...) filled with `fill`.
Result<client::StoreResult> StoreChunk(client::Client& worker, std::uint32_t first_token,
                                       std::byte fill, const std::string& request_id,
                                       const std::string& cache_salt = "") {
  std::vector<std::byte> chunk(worker.ObjectBytes(), fill);
  client::KeySpec key;
  key.model_name = "http-test-model";
  key.cache_salt = cache_salt;
  for (std::uint32_t t = 0; t < 256; ++t) key.token_ids.push_back(first_token + t);
  key.end = 256;
  key.request_id = request_id;
  std::vector<std::span<const std::byte>> chunks = {chunk};
  return worker.Store(key, chunks);
}
Status StoreOneChunk(client::Client& worker, std::uint32_t first_token, std::byte fill,
                     const std::string& request_id) {
  return StoreChunk(worker, first_token, fill, request_id).status();
}

class HttpTest : public ::testing::Test {
 protected:
  void StartServer(std::vector<std::string> extra = {}, bool logs_to_stdout = true) {
    port_ = FreeTcpPort();
    url_ = Socket("main");
    std::vector<std::string> args = {"--l1-size-gb", l1_size_gb_, "--url", url_, "--port", "0",
                                     "--http-port", std::to_string(port_)};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<ServerProcess>(args);
    if (logs_to_stdout) {
      ASSERT_TRUE(server_->WaitForLog("ready", std::chrono::seconds(60))) << server_->Log();
    }
    http_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  }
  json Json(const httplib::Result& r) { return json::parse(r->body, nullptr, false); }

  int port_ = 0;
  std::string l1_size_gb_ = "0.25";
  std::string url_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(HttpTest, EveryRouteAnswersAsDocumented) {
  StartServer({"--http-admin-open"});
  auto banner = http_->Get("/");
  ASSERT_TRUE(banner);
  EXPECT_EQ(Json(banner)["service"], "lmcache-server");
  auto health = http_->Get("/healthcheck");
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Json(health)["status"], "healthy");

  auto worker = Registered(url_, 7);
  ASSERT_TRUE(StoreOneChunk(*worker, 0, std::byte{3}, "r").ok());

  const json status = Json(http_->Get("/status"));
  EXPECT_EQ(status["phase"], "serving");
  EXPECT_EQ(status["is_healthy"], true);
  ASSERT_EQ(status["instances"].size(), 1u);
  EXPECT_EQ(status["instances"][0]["instance_id"], 7);
  EXPECT_EQ(status["instances"][0]["layout"]["num_layers"], 2);
  EXPECT_EQ(status["l1"]["resident_objects"], 1);
  EXPECT_TRUE(status["pool"]["prefault"].contains("ready_bytes"));

  auto metrics = http_->Get("/metrics");
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("version=0.0.4"), std::string::npos);
  EXPECT_NE(metrics->body.find("lmcache_mp_l1_memory_usage_bytes "), std::string::npos);
  EXPECT_NE(metrics->body.find("lmcache_mp_requests_total{operation=\"commit_store\"} 1"),
            std::string::npos);

  EXPECT_EQ(Json(http_->Get("/version"))["version"].get<std::string>().empty(), false);
  EXPECT_EQ(Json(http_->Get("/loglevel"))["level"], "info");
  auto set = http_->Put("/loglevel", R"({"level":"debug"})", "application/json");
  EXPECT_EQ(set->status, 200);
  EXPECT_EQ(Json(http_->Get("/loglevel"))["level"], "debug");
  EXPECT_EQ(http_->Put("/loglevel", "junk", "application/json")->status, 400);
  EXPECT_EQ(http_->Put("/loglevel?level=loud", "", "application/json")->status, 400);

  // What a web page could send (issue 62, section 8) is refused, and the
  // cache stays as it is: a text/plain or form body, another Origin, a
  // cross-site fetch, a Host that is no name of this server (DNS rebinding).
  const std::vector<std::pair<httplib::Headers, std::string>> cross_site = {
      {{}, "text/plain"},
      {{}, "application/x-www-form-urlencoded"},
      {{{"Origin", "http://evil.example"}}, "application/json"},
      {{{"Origin", "null"}}, "application/json"},
      {{{"Sec-Fetch-Site", "cross-site"}}, "application/json"},
      {{{"Host", "rebound.evil.example:" + std::to_string(port_)}}, "application/json"},
  };
  for (const auto& [headers, type] : cross_site) {
    auto refused = http_->Post("/clear-cache", headers, "", type);
    EXPECT_EQ(refused->status, 403) << type << " " << refused->body;
  }
  EXPECT_EQ(http_->Put("/loglevel", {{"Origin", "http://evil.example"}}, R"({"level":"info"})",
                       "application/json")->status,
            403);
  EXPECT_EQ(Json(http_->Get("/status"))["l1"]["resident_objects"], 1);
  // The page's own origin (this server's address) is fine.
  const std::string own = "http://127.0.0.1:" + std::to_string(port_);
  EXPECT_EQ(http_->Put("/loglevel", {{"Origin", own}}, R"({"level":"debug"})",
                       "application/json")->status,
            200);

  auto cleared = http_->Post("/clear-cache", "", "application/json");
  EXPECT_EQ(cleared->status, 200);
  EXPECT_EQ(Json(cleared)["cleared_objects"], 1);
  EXPECT_EQ(Json(http_->Get("/status"))["l1"]["resident_objects"], 0);
  // It ran through the op table, as the ZMQ clear does: counted in its row.
  EXPECT_NE(http_->Get("/metrics")->body.find(
                "lmcache_mp_requests_total{operation=\"clear_cache\"} 1"),
            std::string::npos);

  // No L2 tier at start: none can be added.
  auto no_tier = http_->Post("/config/adapters", R"({"type":"mock"})", "application/json");
  EXPECT_EQ(no_tier->status, 409);
  EXPECT_NE(no_tier->body.find("--l2-adapter"), std::string::npos) << no_tier->body;
  EXPECT_EQ(http_->Delete("/config/adapters/mock-1")->status, 409);
  EXPECT_EQ(Json(http_->Get("/config/adapters"))["adapters"], json::array());

  auto wrong = http_->Delete("/status");
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "GET");
  EXPECT_TRUE(Json(wrong).contains("error"));
  auto missing = http_->Get("/no/such/route");
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(Json(missing).contains("error"));
  auto too_large = http_->Put("/loglevel", std::string(5 << 20, 'x'), "text/plain");
  EXPECT_EQ(too_large->status, 413);
  EXPECT_NE(too_large->body.find("application/json"), std::string::npos) << too_large->body;
  EXPECT_EQ(http_->Get("/healthcheck")->status, 200);  // still serving after all that
}

// GET /version says what the build is; GET /config every flag's effective
// value, given or default, with the secrets in a flag's value masked; GET
// /config/adapters the L2 cascade in order, each adapter's JSON as given
// (masked) beside its live state.
TEST_F(HttpTest, VersionConfigAndAdaptersSayWhatRunsWithSecretsMasked) {
  const std::filesystem::path l2 = std::filesystem::temp_directory_path() /
                                   ("lmc_http_config_" + std::to_string(::getpid()));
  std::filesystem::remove_all(l2);
  const std::string fs = R"({"type":"fs","base_path":")" + l2.string() + R"(","max_size_gb":0.1})";
  // Redis behind a password, where nothing listens: the server goes on
  // without it, and nothing it shows may carry the password.
  const std::string second = kBuiltWithResp
                                  ? R"({"type":"resp","url":"redis://admin:hunter2@127.0.0.1:1"})"
                                  : R"({"type":"mock","max_size_gb":0.1})";
  StartServer({"--l2-adapter", fs, "--l2-adapter", second, "--chunk-size", "128"});
  const json version = Json(http_->Get("/version"));
  EXPECT_FALSE(version["version"].get<std::string>().empty());
  EXPECT_FALSE(version["commit"].get<std::string>().empty());
  for (const char* option : {"cuda", "io_uring", "resp"}) {
    EXPECT_TRUE(version["build"][option].is_boolean()) << option;
  }

  auto config = http_->Get("/config");
  ASSERT_TRUE(config);
  EXPECT_EQ(config->status, 200);
  const json flags = Json(config)["flags"];
  EXPECT_EQ(flags["--chunk-size"]["value"], "128");
  EXPECT_EQ(flags["--chunk-size"]["given"], true);
  EXPECT_EQ(flags["--eviction-ratio"]["given"], false);
  EXPECT_EQ(flags["--eviction-ratio"]["value"], "0.2");  // its default
  ASSERT_TRUE(flags["--l2-adapter"]["value"].is_array());
  ASSERT_EQ(flags["--l2-adapter"]["value"].size(), 2u);
  EXPECT_EQ(config->body.find("hunter2"), std::string::npos) << config->body;
  if (kBuiltWithResp) {
    EXPECT_NE(flags["--l2-adapter"]["value"][1].get<std::string>().find("redis://admin:***@"),
              std::string::npos);
  }

  auto adapters = http_->Get("/config/adapters");
  ASSERT_TRUE(adapters);
  EXPECT_EQ(adapters->body.find("hunter2"), std::string::npos) << adapters->body;
  const json cascade = Json(adapters)["adapters"];
  ASSERT_EQ(cascade.size(), 2u);
  EXPECT_EQ(cascade[0]["position"], 1);
  EXPECT_EQ(cascade[0]["type"], "fs");
  EXPECT_EQ(cascade[0]["config"]["base_path"], l2.string());
  EXPECT_EQ(cascade[0]["condition"], "ok");
  if (kBuiltWithResp) {
    EXPECT_EQ(cascade[1]["type"], "resp");
    EXPECT_EQ(cascade[1]["config"]["url"], "redis://admin:***@127.0.0.1:1");
    EXPECT_NE(cascade[1]["condition"], "ok");  // nothing listens there
  }
  for (const char* shown : {"/status", "/metrics"}) {
    const std::string body = http_->Get(shown)->body;
    EXPECT_EQ(body.find("hunter2"), std::string::npos) << shown;
  }
  EXPECT_EQ(server_->Log().find("hunter2"), std::string::npos) << server_->Log();
  EXPECT_EQ(http_->Post("/config", "", "text/plain")->status, 405);
  std::filesystem::remove_all(l2);
}

// GET /status/memory-pressure of the real binary: L1 against its eviction
// trigger, the fs tier against its max_size_gb, in the reference's shape.
TEST_F(HttpTest, MemoryPressureReportsEachTierAgainstItsOwnBound) {
  const fs::path dir =
      fs::temp_directory_path() / ("lmc_http_pressure_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // noop eviction and a tiny trigger: one stored chunk puts L1 over it, and stays.
  StartServer({"--instance-id", "node-a", "--eviction-policy", "noop",
               "--eviction-trigger-watermark", "0.0001", "--l2-adapter",
               R"({"type":"fs","base_path":")" + dir.string() + R"(","max_size_gb":1})"});
  const json before = Json(http_->Get("/status/memory-pressure"));
  EXPECT_EQ(before["instance_id"], "node-a");
  EXPECT_EQ(before["overall_level"], "normal");
  EXPECT_EQ(before["complete"], true);
  ASSERT_EQ(before["tiers"].size(), 2u);
  EXPECT_EQ(before["tiers"][0]["tier"], "l1");
  EXPECT_EQ(before["tiers"][0]["eviction_policy"], "noop");
  EXPECT_EQ(before["tiers"][0]["trigger_watermark"], 0.0001);
  EXPECT_EQ(before["tiers"][1]["tier"], "l2");
  EXPECT_EQ(before["tiers"][1]["backend_type"], "fs");
  EXPECT_EQ(before["tiers"][1]["capacity_bytes"], 1ull << 30);
  EXPECT_EQ(before["tiers"][1]["health"], "ok");

  auto worker = Registered(url_, 9);
  ASSERT_TRUE(StoreOneChunk(*worker, 0, std::byte{5}, "p").ok());

  const json status = Json(http_->Get("/status"));
  const json after = Json(http_->Get("/status/memory-pressure"));
  EXPECT_EQ(after["overall_level"], "high");
  EXPECT_EQ(after["tiers"][0]["level"], "high");
  EXPECT_EQ(after["tiers"][0]["used_bytes"], status["l1"]["used_bytes"]);
  EXPECT_EQ(after["tiers"][0]["capacity_bytes"], status["pool"]["size_bytes"]);
  EXPECT_GE(after["timestamp_ms"].get<std::int64_t>(), before["timestamp_ms"].get<std::int64_t>());
  EXPECT_EQ(http_->Post("/status/memory-pressure", "", "text/plain")->status, 405);
  // The store returned once the chunk was in L1; the server's write-behind
  // (StoreController's l2-store workers, FsAdapter::WriteTemporary/Publish)
  // writes it into dir/.tmp and renames it into dir afterwards, and recreates
  // dir/.tmp if it is gone. Stop the server (killed and reaped: none of its
  // threads runs any more) before removing the directory it writes into.
  server_.reset();
  fs::remove_all(dir);
}

// Issue 19: POST /clear-cache on the default 127.0.0.1:8080 was open to every
// local process. The routes that change anything are now off by default;
// probes and scrapes stay open.
TEST_F(HttpTest, RoutesThatChangeAnythingAreOffByDefaultWhileProbesAndScrapesWork) {
  StartServer();
  auto cleared = http_->Post("/clear-cache", "", "application/json");
  EXPECT_EQ(cleared->status, 403);
  EXPECT_NE(cleared->body.find("--http-admin-token-file"), std::string::npos) << cleared->body;
  EXPECT_EQ(http_->Put("/loglevel", R"({"level":"debug"})", "application/json")->status, 403);
  EXPECT_EQ(Json(http_->Get("/loglevel"))["level"], "info");
  EXPECT_EQ(http_->Get("/metrics")->status, 200);
  EXPECT_EQ(http_->Get("/healthcheck")->status, 200);
  EXPECT_EQ(http_->Get("/status")->status, 200);
}

// A token file, 0600 as the server demands (`openssl rand -hex 32` in the docs).
std::string TokenFile(const std::string& token, fs::perms perms) {
  const fs::path path =
      fs::temp_directory_path() / ("lmc_http_token_" + std::to_string(::getpid()));
  std::ofstream(path) << token << "\n";
  fs::permissions(path, perms);
  return path.string();
}

TEST_F(HttpTest, AnAdminTokenOpensThoseRoutesToItsBearerOnly) {
  const std::string token = "3f9c2a7be1d04c6f8a5b9e0d7c1f2a3b";
  const std::string file = TokenFile(token, fs::perms::owner_read | fs::perms::owner_write);
  StartServer({"--http-admin-token-file", file});
  auto anonymous = http_->Post("/clear-cache", "", "application/json");
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(anonymous->get_header_value("WWW-Authenticate"), "Bearer");
  httplib::Headers wrong = {{"Authorization", "Bearer " + token.substr(0, 31) + "0"}};
  EXPECT_EQ(http_->Post("/clear-cache", wrong, "", "application/json")->status, 403);
  httplib::Headers shorter = {{"Authorization", "Bearer " + token.substr(0, 16)}};
  EXPECT_EQ(http_->Post("/clear-cache", shorter, "", "application/json")->status, 403);
  httplib::Headers right = {{"Authorization", "Bearer " + token}};
  EXPECT_EQ(http_->Post("/clear-cache", right, "", "application/json")->status, 200);
  // With a token, an operator's own name for the server (a Service's DNS
  // name) is fine; a page of another origin is not, token or not.
  httplib::Headers by_name = right;
  by_name.emplace("Host", "lmcache.default.svc:" + std::to_string(port_));
  EXPECT_EQ(http_->Post("/clear-cache", by_name, "", "application/json")->status, 200);
  httplib::Headers from_a_page = right;
  from_a_page.emplace("Origin", "http://evil.example");
  EXPECT_EQ(http_->Post("/clear-cache", from_a_page, "", "application/json")->status, 403);
  EXPECT_EQ(http_->Put("/loglevel", right, R"({"level":"debug"})", "application/json")->status,
            200);
  EXPECT_EQ(Json(http_->Get("/loglevel"))["level"], "debug");
  fs::remove(file);
}

TEST_F(HttpTest, ATokenFileOthersCanReadIsRefusedAtStartup) {
  const std::string file = TokenFile("3f9c2a7be1d04c6f8a5b9e0d7c1f2a3b",
                                     fs::perms::owner_read | fs::perms::owner_write |
                                         fs::perms::group_read | fs::perms::others_read);
  StartServer({"--http-admin-token-file", file}, /*logs_to_stdout=*/false);
  EXPECT_NE(server_->WaitExit(std::chrono::seconds(30)), 0);
  EXPECT_NE(server_->Log().find("chmod 600 " + file), std::string::npos) << server_->Log();
  fs::remove(file);
}

// A token file another user owns is refused, mode 0600 or not: its owner
// chooses the token (issue 62, section 8; before, a file of nobody's was taken).
TEST_F(HttpTest, ATokenFileAnotherUserOwnsIsRefusedAtStartup) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to give the file to another user";
  const std::string file = TokenFile("3f9c2a7be1d04c6f8a5b9e0d7c1f2a3b",
                                     fs::perms::owner_read | fs::perms::owner_write);
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  StartServer({"--http-admin-token-file", file}, /*logs_to_stdout=*/false);
  EXPECT_NE(server_->WaitExit(std::chrono::seconds(30)), 0);
  EXPECT_NE(server_->Log().find("owned by uid 65534"), std::string::npos) << server_->Log();
  fs::remove(file);
}

// --admin-ops governs the HTTP clear as it governs the ZMQ one: off refuses
// both, even to an HTTP endpoint opened to admin routes.
TEST_F(HttpTest, AdminOpsOffRefusesTheHttpClearToo) {
  StartServer({"--http-admin-open", "--admin-ops", "off"});
  auto worker = Registered(url_, 8);
  ASSERT_TRUE(StoreOneChunk(*worker, 1000, std::byte{5}, "r").ok());
  auto cleared = http_->Post("/clear-cache", "", "application/json");
  EXPECT_EQ(cleared->status, 403);
  EXPECT_NE(cleared->body.find("--admin-ops"), std::string::npos) << cleared->body;
  EXPECT_EQ(Json(http_->Get("/status"))["l1"]["resident_objects"], 1);
  EXPECT_FALSE(worker->Call("clear", {}).ok());
  EXPECT_EQ(Json(http_->Get("/status"))["l1"]["resident_objects"], 1);
}

TEST_F(HttpTest, ReadOnlyRefusesWhatChangesState) {
  StartServer({"--http-read-only"});
  EXPECT_EQ(http_->Post("/clear-cache", "", "application/json")->status, 403);
  EXPECT_EQ(http_->Put("/loglevel", R"({"level":"debug"})", "application/json")->status, 403);
  EXPECT_EQ(http_->Get("/metrics")->status, 200);
}

TEST_F(HttpTest, UnhealthyWhilePrefaultingBelowTheReadyFractionYetServingRequests) {
  port_ = FreeTcpPort();
  url_ = Socket("prefault");
  server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
      "--l1-size-gb", "2", "--prefault-threads", "1", "--ready-prefault-fraction", "1", "--url",
      url_, "--port", "0", "--http-port", std::to_string(port_)});
  http_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  bool saw_not_ready = false;
  bool healthy = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!healthy && std::chrono::steady_clock::now() < deadline) {
    if (auto r = http_->Get("/healthcheck")) {
      if (r->status == 503) {
        const std::string reason = Json(r)["reason"];
        saw_not_ready |= reason.find("pre-faulting") != std::string::npos ||
                         reason == "starting";
      }
      healthy = r->status == 200;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(saw_not_ready);
  EXPECT_TRUE(healthy) << server_->Log();
  EXPECT_TRUE(server_->WaitForLog("pre-faulted", std::chrono::seconds(60)));
}

TEST_F(HttpTest, SigtermDrainsUntilTheWorkersLeaveThenExitsCleanly) {
  StartServer({"--drain-timeout-seconds", "60"});
  auto worker = Registered(url_, 1);
  ASSERT_EQ(kill(server_->pid(), SIGTERM), 0);
  ASSERT_TRUE(server_->WaitForLog("draining", std::chrono::seconds(60)));
  auto health = http_->Get("/healthcheck");
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(Json(health)["reason"], "draining");
  // A new worker is refused; the registered one is still served.
  client::ClientOptions options;
  options.url = url_;
  auto newcomer = client::Client::Connect(options);
  client::EngineContext context;
  context.instance_id = 2;
  context.model_name = "http-test-model";
  context.num_layers = 2;
  context.hidden_dim_size = 64;
  auto refused = (*newcomer)->Register(context);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(worker->Ping().ok());
  EXPECT_EQ(server_->WaitExit(std::chrono::seconds(1)), -1);  // still draining
  ASSERT_TRUE(worker->Unregister().ok());
  EXPECT_EQ(server_->WaitExit(std::chrono::seconds(20)), 0) << server_->Log();
  EXPECT_NE(server_->Log().find("drained"), std::string::npos);
  EXPECT_FALSE(fs::exists("/dev/shm/lmcache_l1_pool_" + std::to_string(server_->pid())));
}

TEST_F(HttpTest, ASecondSignalDuringTheDrainExitsAtOnce) {
  StartServer({"--drain-timeout-seconds", "600"});
  auto worker = Registered(url_, 1);
  ASSERT_EQ(kill(server_->pid(), SIGTERM), 0);
  ASSERT_TRUE(server_->WaitForLog("draining", std::chrono::seconds(60)));
  ASSERT_EQ(kill(server_->pid(), SIGINT), 0);
  EXPECT_EQ(server_->WaitExit(std::chrono::seconds(20)), 0) << server_->Log();
  EXPECT_FALSE(fs::exists("/dev/shm/lmcache_l1_pool_" + std::to_string(server_->pid())));
}

TEST_F(HttpTest, JsonLogsAreOneObjectPerLineAndSighupReopensTheFile) {
  const fs::path log = fs::temp_directory_path() / ("lmc_http_log_" + std::to_string(::getpid()));
  fs::remove(log);
  fs::remove(log.string() + ".1");
  StartServer({"--log-format", "json", "--log-file", log.string()}, /*logs_to_stdout=*/false);
  auto logged = [](const fs::path& file, const std::string& text) {
    std::ifstream in(file);
    std::stringstream all;
    all << in.rdbuf();
    return all.str().find(text) != std::string::npos;
  };
  // Waits (a generous bound, not a pace) until `file` holds `text`.
  auto wait_logged = [&logged](const fs::path& file, const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!logged(file, text) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return logged(file, text);
  };
  ASSERT_TRUE(wait_logged(log, "ready")) << server_->Log();
  fs::rename(log, log.string() + ".1");  // logrotate moves it
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  // The main thread reopens the file when it takes the signal, some time
  // after kill() returned; the file exists from its fopen on, before the
  // line that says so. Wait for that line, then register: "registered
  // instance 3" then lands in the new file, not in the rotated one.
  ASSERT_TRUE(wait_logged(log, "log file reopened")) << server_->Log();
  auto worker = Registered(url_, 3);
  ASSERT_TRUE(wait_logged(log, "registered instance 3"));
  // Stopped (killed and reaped) before the files are read: no line is half
  // written while we parse them.
  server_.reset();
  for (const fs::path& file : {fs::path(log.string() + ".1"), log}) {
    std::ifstream in(file);
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) {
      const json entry = json::parse(line, nullptr, false);
      ASSERT_FALSE(entry.is_discarded()) << line;
      EXPECT_TRUE(entry.contains("time") && entry.contains("level") && entry.contains("msg"));
      ++lines;
    }
    EXPECT_GT(lines, 0) << file;
  }
  std::ifstream rotated(log.string() + ".1");
  std::stringstream text;
  text << rotated.rdbuf();
  EXPECT_NE(text.str().find("ready"), std::string::npos);
  fs::remove(log);
  fs::remove(log.string() + ".1");
}

}  // namespace
}  // namespace lmcache

namespace lmcache {
namespace {

// The reference's quota routes (p2p-spec.md 12.1): their fields, their 400s,
// _default for the empty salt, the admin gate on what changes, and a tenant
// capped in L1 at its quota while another is not touched.
TEST_F(HttpTest, QuotaRoutesCapATenantAsTheReferenceDescribes) {
  const std::string token = "9a8b7c6d5e4f30211203f4e5d6c7b8a9";
  const std::string file = TokenFile(token, fs::perms::owner_read | fs::perms::owner_write);
  StartServer({"--http-admin-token-file", file, "--quota", "_default=0.5"});
  const httplib::Headers admin = {{"Authorization", "Bearer " + token}};
  auto worker = Registered(url_, 9);
  const std::uint64_t object = worker->ObjectBytes();  // a multiple of the 4 KiB alignment
  const double two_objects_gb = 2.0 * static_cast<double>(object) / (1 << 30);
  const std::string body = json{{"limit_gb", two_objects_gb}}.dump();

  EXPECT_EQ(http_->Put("/quota/tenant-a", body, "application/json")->status, 401);
  auto set = http_->Put("/quota/tenant-a", admin, body, "application/json");
  ASSERT_EQ(set->status, 200) << set->body;
  EXPECT_EQ(Json(set), (json{{"cache_salt", "tenant-a"}, {"limit_gb", two_objects_gb},
                             {"status", "ok"}}));
  for (const char* bad : {"{", "[]", "{}", R"({"limit_gb":"1"})", R"({"limit_gb":-1})",
                          R"({"limit_gb":true})", R"({"limit_gb":null})", R"({"limit_gb":NaN})",
                          R"({"limit_gb":1e999})"}) {
    auto refused = http_->Put("/quota/tenant-a", admin, bad, "application/json");
    EXPECT_EQ(refused->status, 400) << bad;
    EXPECT_TRUE(Json(refused).contains("error")) << bad;
  }
  EXPECT_EQ(http_->Put("/quota/a@b", admin, body, "application/json")->status, 400);
  // A salt that is not UTF-8 (percent-decoded from the path) is refused, and
  // /quota and /status, which name the salts with a quota, keep answering.
  EXPECT_EQ(http_->Put("/quota/%FF%FE", admin, body, "application/json")->status, 400);
  EXPECT_EQ(http_->Get("/quota")->status, 200);
  EXPECT_EQ(http_->Post("/quota/tenant-a", admin, body, "application/json")->status, 405);

  // Four chunks of tenant-a: its two newest stay; tenant-b's four all stay.
  for (std::uint32_t i = 0; i < 4; ++i) {
    auto stored = StoreChunk(*worker, 1000 * (i + 1), std::byte{1}, "a", "tenant-a");
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    EXPECT_EQ(stored->stored, 1u);
    stored = StoreChunk(*worker, 1000 * (i + 1), std::byte{2}, "b", "tenant-b");
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  }
  EXPECT_EQ(http_->Get("/quota/tenant-a")->status, 401);  // any salt's figures: admin only
  const json a = Json(http_->Get("/quota/tenant-a", admin));
  EXPECT_EQ(a["cache_salt"], "tenant-a");
  EXPECT_EQ(a["exists"], true);
  EXPECT_DOUBLE_EQ(a["limit_gb"].get<double>(), two_objects_gb);
  EXPECT_DOUBLE_EQ(a["current_usage_gb"].get<double>(), two_objects_gb);
  EXPECT_EQ(a["usage_bytes"], 2 * object);
  EXPECT_EQ(a["quota_evicted_objects"], 2);
  const json b = Json(http_->Get("/quota/tenant-b", admin));  // never 404
  EXPECT_EQ(b["exists"], false);
  EXPECT_EQ(b["limit_gb"], 0.0);
  EXPECT_EQ(b["usage_bytes"], 4 * object);
  EXPECT_EQ(Json(http_->Get("/status"))["l1"]["resident_objects"], 6);

  const json all = Json(http_->Get("/quota"));
  EXPECT_EQ(all["mode"], "on");
  ASSERT_EQ(all["users"].size(), 2u);  // tenant-b has no quota: counted in "other" only
  EXPECT_DOUBLE_EQ(all["users"]["_default"]["limit_gb"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(all["users"]["tenant-a"]["current_usage_gb"].get<double>(), two_objects_gb);
  EXPECT_EQ(all["other"]["tenants"], 1);
  EXPECT_EQ(all["other"]["usage_bytes"], 4 * object);
  const std::string metrics = http_->Get("/metrics")->body;
  EXPECT_NE(metrics.find("lmcache_mp_quota_used_bytes{tenant=\"tenant-a\"} " +
                         std::to_string(2 * object)),
            std::string::npos);
  EXPECT_EQ(metrics.find("tenant=\"tenant-b\""), std::string::npos);
  const json quota = Json(http_->Get("/status"))["stats"]["quota"];
  EXPECT_EQ(quota["tenants_with_quota"], 2);
  EXPECT_EQ(quota["tenants"]["tenant-a"]["used_bytes"], 2 * object);
  EXPECT_EQ(quota["tenants"]["tenant-a"]["quota_evicted_objects"], 2);
  EXPECT_EQ(quota["other_used_bytes"], 4 * object);

  EXPECT_EQ(http_->Delete("/quota/tenant-a")->status, 401);
  EXPECT_EQ(Json(http_->Delete("/quota/tenant-a", admin)),
            (json{{"cache_salt", "tenant-a"}, {"status", "removed"}}));
  EXPECT_EQ(Json(http_->Delete("/quota/tenant-a", admin))["status"], "not_found");
  EXPECT_EQ(Json(http_->Get("/quota/tenant-a", admin))["exists"], false);
  EXPECT_EQ(Json(http_->Get("/quota/_default", admin))["exists"], true);
  fs::remove(file);
}

TEST_F(HttpTest, QuotasAreRefusedWhenTurnedOffAndBadQuotaFlagsStopTheStart) {
  StartServer({"--http-admin-open", "--quota-mode", "off"});
  auto refused = http_->Put("/quota/t", R"({"limit_gb":1})", "application/json");
  EXPECT_EQ(refused->status, 409);
  EXPECT_NE(refused->body.find("--quota-mode"), std::string::npos);
  EXPECT_EQ(Json(http_->Get("/quota"))["mode"], "off");
  server_.reset();
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--quota", "tenant"}, {"--quota", "t=-1"},
        {"--quota", "t=lots"}, {"--quota-mode", "strict"},
        {"--quota-mode", "off", "--quota", "t=1"}}) {
    StartServer(bad, /*logs_to_stdout=*/false);
    EXPECT_NE(server_->WaitExit(std::chrono::seconds(30)), 0) << bad[1];
    EXPECT_NE(server_->Log().find("--quota"), std::string::npos) << server_->Log();
  }
}

}  // namespace
}  // namespace lmcache

namespace lmcache {
namespace {

// GET /cache/objects: behind the admin token (read-only mode refuses only
// DELETE), pages of keys in the reference's encoded form, each object once,
// filters by salt and model, 400s for what is malformed, and the fs tier's
// objects under tier=l2.
TEST_F(HttpTest, CacheObjectsAreListedInPagesBehindTheAdminToken) {
  const std::string token = "0a1b2c3d4e5f60718293a4b5c6d7e8f9";
  const std::string file = TokenFile(token, fs::perms::owner_read | fs::perms::owner_write);
  const fs::path dir = fs::temp_directory_path() / ("lmc_http_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  StartServer({"--http-admin-token-file", file, "--http-read-only", "--l2-adapter",
               R"({"type":"fs","base_path":")" + dir.string() + R"("})"});
  const httplib::Headers admin = {{"Authorization", "Bearer " + token}};
  auto worker = Registered(url_, 11);
  for (std::uint32_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(StoreChunk(*worker, 1000 * (i + 1), std::byte{4}, "r", i < 3 ? "" : "t2").ok());
  }
  EXPECT_EQ(http_->Get("/cache/objects")->status, 401);
  // Read-only refuses what changes state, not a listing.
  EXPECT_EQ(http_->Delete("/cache/objects", admin, R"({"keys":[]})", "application/json")->status,
            403);

  std::set<std::string> hashes;
  std::string page_token;
  int pages = 0;
  do {
    std::string path = "/cache/objects?tier=l1&page_size=2";
    if (!page_token.empty()) path += "&page_token=" + page_token;
    auto page = http_->Get(path, admin);
    ASSERT_EQ(page->status, 200) << page->body;
    const json body = Json(page);
    EXPECT_EQ(body["adapter"], "l1");
    for (const json& entry : body["entries"]) {
      EXPECT_EQ(entry["key"]["model_name"], "http-test-model");
      EXPECT_EQ(entry["key"]["chunk_hash_hex"].get<std::string>().size(), 64u);
      EXPECT_EQ(entry["size_bytes"], worker->ObjectBytes());
      EXPECT_TRUE(hashes.insert(entry["key"]["chunk_hash_hex"]).second);  // once each
    }
    page_token = body["next_page_token"].is_null() ? "" : body["next_page_token"].get<std::string>();
    ++pages;
  } while (!page_token.empty() && pages < 10);
  EXPECT_EQ(hashes.size(), 5u);
  EXPECT_EQ(pages, 3);
  const json t2 = Json(http_->Get("/cache/objects?cache_salt=t2", admin));
  EXPECT_EQ(t2["entries"].size(), 2u);
  EXPECT_EQ(Json(http_->Get("/cache/objects?model_name=other", admin))["entries"].size(), 0u);
  for (const char* bad : {"?page_size=0", "?page_size=5001", "?page_size=x", "?tier=l3",
                          "?page_token=zz", "?page_token=00"}) {
    EXPECT_EQ(http_->Get(std::string("/cache/objects") + bad, admin)->status, 400) << bad;
  }
  EXPECT_EQ(http_->Get("/cache/objects?tier=l2&adapter=resp-9", admin)->status, 404);
  // The fs tier holds what the write-behind wrote there.
  json l2;
  for (int i = 0; i < 1500; ++i) {  // up to 30 s for the write-behind
    l2 = Json(http_->Get("/cache/objects?tier=l2", admin));
    if (l2["entries"].size() == 5u) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(l2["adapter"], "fs-1");
  ASSERT_EQ(l2["entries"].size(), 5u);
  server_.reset();
  fs::remove(file);
  fs::remove_all(dir);
}

// DELETE /cache/objects: by key or by a prompt's tokens, in L1 and in an fs
// tier, with what a lookup holds left unless forced, and 400s for what is
// malformed or too many.
TEST_F(HttpTest, CacheObjectsAreDeletedByKeyOrByPromptAndLockedOnesNeedForce) {
  const fs::path dir = fs::temp_directory_path() / ("lmc_http_del_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  StartServer({"--http-admin-open", "--l2-adapter",
               R"({"type":"fs","base_path":")" + dir.string() + R"("})"});
  auto worker = Registered(url_, 12);
  for (std::uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(StoreChunk(*worker, 1000 * (i + 1), std::byte{6}, "r").ok());
  }
  json listed;
  for (int i = 0; i < 1500; ++i) {  // up to 30 s for the write-behind
    listed = Json(http_->Get("/cache/objects?tier=l2"));
    if (listed["entries"].size() == 3u) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(listed["entries"].size(), 3u);
  const json l1 = Json(http_->Get("/cache/objects"));
  ASSERT_EQ(l1["entries"].size(), 3u);
  // A lookup's locks hold the first chunk: left without force.
  client::KeySpec first;
  first.model_name = "http-test-model";
  for (std::uint32_t t = 0; t < 256; ++t) first.token_ids.push_back(1000 + t);
  first.end = 256;
  first.request_id = "locker";
  first.worker_id = std::nullopt;
  ASSERT_EQ(*worker->Lookup(first), 1u);

  json keys = json::array();
  for (const json& entry : l1["entries"]) keys.push_back(entry["key"]);
  auto reply = http_->Delete("/cache/objects", json{{"keys", keys}, {"tier", "l1"}}.dump(),
                             "application/json");
  ASSERT_EQ(reply->status, 200) << reply->body;
  EXPECT_EQ(Json(reply)["deleted"], 2);
  EXPECT_EQ(Json(reply)["skipped"], 1);
  EXPECT_EQ(Json(reply)["ok"], true);
  EXPECT_EQ(Json(reply)["tiers"]["l1"]["locked"], 1);
  reply = http_->Delete("/cache/objects",
                        json{{"keys", keys}, {"tier", "l1"}, {"force", true}}.dump(),
                        "application/json");
  EXPECT_EQ(Json(reply)["deleted"], 1);
  EXPECT_EQ(Json(reply)["tiers"]["l1"]["not_found"], 2);
  EXPECT_EQ(Json(http_->Get("/status"))["l1"]["resident_objects"], 0);

  // By prompt, in L2 (the reference's default tier): the first chunk's tokens.
  json tokens = json::array();
  for (std::uint32_t t = 0; t < 256; ++t) tokens.push_back(1000 + t);
  reply = http_->Delete("/cache/objects",
                        json{{"token_ids", tokens}, {"model_name", "http-test-model"}}.dump(),
                        "application/json");
  ASSERT_EQ(reply->status, 200) << reply->body;
  EXPECT_EQ(Json(reply)["deleted"], 1);
  EXPECT_EQ(Json(reply)["tiers"]["fs-1"]["deleted"], 1);
  EXPECT_EQ(Json(http_->Get("/cache/objects?tier=l2"))["entries"].size(), 2u);

  for (const std::string& bad :
       {std::string("{"), std::string("{}"), std::string(R"({"keys":[],"token_ids":[]})"),
        std::string(R"({"keys":[{"chunk_hash_hex":"00"}]})"),
        std::string(R"({"keys":[],"tier":"l9"})"), std::string(R"({"keys":[],"force":1})"),
        std::string(R"({"token_ids":[1,2],"model_name":"m"})"),
        std::string(R"({"token_ids":[-1],"model_name":"m"})"),
        std::string(R"({"token_ids":[1]})")}) {
    EXPECT_EQ(http_->Delete("/cache/objects", bad, "application/json")->status, 400) << bad;
  }
  // A named adapter that does not exist: 404, and nothing deleted anywhere.
  auto unknown = http_->Delete("/cache/objects",
                               json{{"keys", keys}, {"tier", "all"}, {"adapter", "resp-7"}}.dump(),
                               "application/json");
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(Json(http_->Get("/cache/objects?tier=l2"))["entries"].size(), 2u);
  std::string braces;
  for (int i = 0; i < 20000; ++i) braces += "{},";
  EXPECT_EQ(http_->Delete("/cache/objects", R"({"keys":[)" + braces + "{}]}", "application/json")
                ->status,
            400);
  json too_many = json::array();
  for (int i = 0; i < 10001; ++i) too_many.push_back(keys[0]);
  EXPECT_EQ(http_->Delete("/cache/objects", json{{"keys", too_many}}.dump(), "application/json")
                ->status,
            400);
  EXPECT_EQ(http_->Get("/healthcheck")->status, 200);
  server_.reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmcache

namespace lmcache {
namespace {

// Pins (issue 44, section 3): a prompt pinned by its tokens stays through
// eviction pressure that cycles the pool several times over; pins are
// listed and counted; first pins past --max-pinned-fraction are refused
// with 409; unpinning by tokens lets it go.
TEST_F(HttpTest, APinnedPromptSurvivesEvictionPressureWithinThePinnedBound) {
  l1_size_gb_ = "0.02";  // 20 MiB: about 160 objects of 128 KiB
  StartServer({"--http-admin-open", "--max-pinned-fraction", "0.05"});  // 8 objects
  auto worker = Registered(url_, 13);
  ASSERT_TRUE(StoreChunk(*worker, 1000, std::byte{7}, "pinned").ok());
  json tokens = json::array();
  for (std::uint32_t t = 0; t < 256; ++t) tokens.push_back(1000 + t);
  const json prompt = {{"token_ids", tokens}, {"model_name", "http-test-model"}};
  auto pinned = http_->Post("/cache/pins", prompt.dump(), "application/json");
  ASSERT_EQ(pinned->status, 200) << pinned->body;
  EXPECT_EQ(Json(pinned)["pinned"], 1);
  EXPECT_EQ(Json(pinned)["pinned_objects"], 1);
  EXPECT_EQ(Json(pinned)["limit_bytes"], 1048576);

  // 400 chunks through a pool of about 160: everything else is evicted.
  for (std::uint32_t i = 0; i < 400; ++i) {
    ASSERT_TRUE(StoreChunk(*worker, 100000 + 256 * i, std::byte{8}, "fill").ok()) << i;
  }
  const json status = Json(http_->Get("/status"));
  EXPECT_GT(status["stats"]["eviction"]["evicted_objects"].get<std::uint64_t>(), 200u);
  client::KeySpec key;
  key.model_name = "http-test-model";
  for (std::uint32_t t = 0; t < 256; ++t) key.token_ids.push_back(1000 + t);
  key.end = 256;
  key.request_id = "check";
  key.worker_id = std::nullopt;
  EXPECT_EQ(*worker->Lookup(key), 1u);
  ASSERT_TRUE(worker->FreeLookupLocks(key).ok());
  const json pins = Json(http_->Get("/cache/pins"));
  ASSERT_EQ(pins["entries"].size(), 1u);
  EXPECT_EQ(pins["entries"][0]["pins"], 1);
  EXPECT_EQ(pins["pinned_bytes"], worker->ObjectBytes());
  EXPECT_EQ(status["stats"]["l1"]["pinned_objects"], 1);

  // Ten more first pins: seven fit under the bound, three are refused.
  json keys = json::array();
  const json listed = Json(http_->Get("/cache/objects?page_size=20"));
  for (const json& entry : listed["entries"]) {
    if (keys.size() < 10 && entry["key"] != pins["entries"][0]["key"]) keys.push_back(entry["key"]);
  }
  ASSERT_EQ(keys.size(), 10u);
  auto refused = http_->Post("/cache/pins", json{{"keys", keys}}.dump(), "application/json");
  EXPECT_EQ(refused->status, 409);
  EXPECT_EQ(Json(refused)["pinned"], 7);
  EXPECT_EQ(Json(refused)["over_limit"], 3);
  EXPECT_NE(Json(refused)["error"].get<std::string>().find("--max-pinned-fraction"),
            std::string::npos);
  EXPECT_EQ(Json(http_->Delete("/cache/pins", json{{"keys", keys}}.dump(), "application/json"))
                ["unpinned"],
            7);
  auto unpinned = http_->Delete("/cache/pins", prompt.dump(), "application/json");
  EXPECT_EQ(Json(unpinned)["unpinned"], 1);
  EXPECT_EQ(Json(unpinned)["pinned_objects"], 0);
  EXPECT_EQ(Json(http_->Delete("/cache/pins", prompt.dump(), "application/json"))["not_pinned"], 1);
  EXPECT_EQ(http_->Post("/cache/pins", "{}", "application/json")->status, 400);
  EXPECT_EQ(http_->Patch("/cache/pins", "{}", "application/json")->status, 405);
}

}  // namespace
}  // namespace lmcache

namespace lmcache {
namespace {

// Warm prefetch (issue 44, section 3): a prompt stored, written behind to an
// fs tier and cleared from L1 comes back into L1 through POST
// /cache/prefetches before any lookup, unlocked; its result is read once;
// what cannot be served answers 400, 404 or 409.
TEST_F(HttpTest, AWarmPrefetchLoadsAPromptFromTheFsTierIntoL1Unlocked) {
  const fs::path dir = fs::temp_directory_path() / ("lmc_http_warm_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  StartServer({"--http-admin-open", "--l2-adapter",
               R"({"type":"fs","base_path":")" + dir.string() + R"("})"});
  auto worker = Registered(url_, 14);
  client::KeySpec key;
  key.model_name = "http-test-model";
  for (std::uint32_t t = 0; t < 3 * 256; ++t) key.token_ids.push_back(5000 + t);
  key.end = 3 * 256;
  key.request_id = "warm";
  std::vector<std::vector<std::byte>> chunks(3, std::vector<std::byte>(worker->ObjectBytes()));
  for (std::size_t c = 0; c < 3; ++c) std::fill(chunks[c].begin(), chunks[c].end(), std::byte(c + 1));
  std::vector<std::span<const std::byte>> spans(chunks.begin(), chunks.end());
  ASSERT_TRUE(worker->Store(key, spans).ok());
  for (int i = 0; i < 1500 && Json(http_->Get("/cache/objects?tier=l2"))["entries"].size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(Json(http_->Get("/cache/objects?tier=l2"))["entries"].size(), 3u);
  ASSERT_EQ(http_->Post("/clear-cache", "", "application/json")->status, 200);
  ASSERT_EQ(Json(http_->Get("/status"))["l1"]["resident_objects"], 0);

  json tokens = json::array();
  for (const std::uint32_t t : key.token_ids) tokens.push_back(t);
  const json body = {{"model_name", "http-test-model"}, {"world_size", 1}, {"token_ids", tokens}};
  auto submitted = http_->Post("/cache/prefetches", body.dump(), "application/json");
  ASSERT_EQ(submitted->status, 202) << submitted->body;
  EXPECT_EQ(Json(submitted)["status"], "submitted");
  EXPECT_EQ(Json(submitted)["chunks"], 3);
  const std::string id = Json(submitted)["request_id"];
  json progress;
  for (int i = 0; i < 3000; ++i) {  // up to 30 s for the load
    progress = Json(http_->Get("/cache/prefetches/" + id));
    if (progress["status"] != "pending") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(progress, (json{{"status", "completed"}, {"request_id", id}, {"found_keys", 3},
                            {"total_keys", 3}}));
  EXPECT_EQ(http_->Get("/cache/prefetches/" + id)->status, 404);  // read once
  const json l1 = Json(http_->Get("/status"))["l1"];
  EXPECT_EQ(l1["resident_objects"], 3);
  EXPECT_EQ(l1["locked_bytes"], 0);  // warm: retained, not held for anyone

  // Now a lookup finds the whole prompt in L1, and the bytes are the stored ones.
  client::KeySpec lookup = key;
  lookup.request_id = "after-warm";
  lookup.worker_id = std::nullopt;
  EXPECT_EQ(*worker->Lookup(lookup), 3u);
  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(worker->ObjectBytes()));
  std::vector<std::span<std::byte>> out_spans(out.begin(), out.end());
  client::KeySpec retrieve = key;
  retrieve.request_id = "after-warm";
  ASSERT_TRUE(worker->Retrieve(retrieve, out_spans).ok());
  EXPECT_EQ(out, chunks);

  // All in L1 already: nothing to do.
  auto noop = http_->Post("/cache/prefetches", body.dump(), "application/json");
  EXPECT_EQ(noop->status, 202);
  EXPECT_EQ(Json(noop)["status"], "noop");
  EXPECT_EQ(Json(http_->Get("/cache/prefetches/" + Json(noop)["request_id"].get<std::string>()))
                ["found_keys"],
            3);
  json other = body;
  other["model_name"] = "not-registered";
  auto no_layout = http_->Post("/cache/prefetches", other.dump(), "application/json");
  EXPECT_EQ(no_layout->status, 409);
  EXPECT_NE(no_layout->body.find("registered"), std::string::npos);
  for (const char* bad : {"{", "{}", R"({"model_name":"m","token_ids":"x"})",
                          R"({"model_name":"m","token_ids":[1],"world_size":0})",
                          R"({"model_name":"http-test-model","token_ids":[1,2]})"}) {
    EXPECT_EQ(http_->Post("/cache/prefetches", bad, "application/json")->status, 400) << bad;
  }
  EXPECT_EQ(http_->Get("/cache/prefetches/abc123")->status, 404);
  server_.reset();
  fs::remove_all(dir);
}

// POST and DELETE /config/adapters on the real binary: an fs tier joins
// ahead of the configured one behind the admin token, takes what is stored
// from then on, and serves a prompt byte-exact after the configured tier
// left; each refusal names what to change.
TEST_F(HttpTest, AnL2AdapterJoinsAndLeavesTheCascadeAtRuntime) {
  const fs::path a = fs::temp_directory_path() / ("lmc_http_cascade_a_" + std::to_string(::getpid()));
  const fs::path b = fs::temp_directory_path() / ("lmc_http_cascade_b_" + std::to_string(::getpid()));
  fs::remove_all(a);
  fs::remove_all(b);
  const std::string token = "5d1e0c9b8a7f6e5d4c3b2a1908f7e6d5";
  const std::string file = TokenFile(token, fs::perms::owner_read | fs::perms::owner_write);
  StartServer({"--http-admin-token-file", file, "--l2-fs-root", fs::temp_directory_path().string(),
               "--l2-adapter",
               R"({"type":"fs","name":"disk-a","base_path":")" + a.string() + R"("})"});
  const httplib::Headers admin = {{"Authorization", "Bearer " + token}};
  const std::string disk_b = R"({"type":"fs","name":"disk-b","base_path":")" + b.string() + R"("})";
  // Outside --l2-fs-root (here through a '..' and a symbolic link out of it): refused,
  // nothing is created (issue 62, section 3).
  const fs::path outside = fs::path("/var/tmp") / ("lmc_http_outside_" + std::to_string(::getpid()));
  const fs::path link = fs::temp_directory_path() / ("lmc_http_link_" + std::to_string(::getpid()));
  fs::remove(link);
  fs::create_directory_symlink("/var/tmp", link);
  for (const std::string& base : {outside.string(),
                                  (fs::temp_directory_path() / ".." / "var" / "tmp" / "x").string(),
                                  (link / "x").string(), fs::temp_directory_path().string()}) {
    auto r = http_->Post("/config/adapters", admin,
                         R"({"type":"fs","base_path":")" + base + R"("})", "application/json");
    EXPECT_EQ(r->status, 403) << base << ": " << r->body;
    EXPECT_NE(r->body.find("--l2-fs-root"), std::string::npos) << r->body;
  }
  fs::remove(link);
  EXPECT_FALSE(fs::exists(outside));

  EXPECT_EQ(http_->Post("/config/adapters", disk_b, "application/json")->status, 401);
  EXPECT_EQ(http_->Delete("/config/adapters/disk-a")->status, 401);
  const httplib::Headers wrong = {{"Authorization", "Bearer " + token.substr(0, 31) + "0"}};
  EXPECT_EQ(http_->Post("/config/adapters", wrong, disk_b, "application/json")->status, 403);
  EXPECT_EQ(http_->Delete("/config/adapters/disk-a", wrong)->status, 403);
  auto added = http_->Post("/config/adapters?position=1", admin, disk_b, "application/json");
  ASSERT_EQ(added->status, 201) << added->body;
  EXPECT_EQ(Json(added)["name"], "disk-b");
  EXPECT_EQ(Json(added)["position"], 1);
  EXPECT_EQ(Json(added)["condition"], "ok");
  json cascade = Json(http_->Get("/config/adapters"))["adapters"];
  ASSERT_EQ(cascade.size(), 2u);
  EXPECT_EQ(cascade[0]["name"], "disk-b");
  EXPECT_EQ(cascade[0]["config"]["base_path"], b.string());
  EXPECT_EQ(cascade[1]["name"], "disk-a");
  EXPECT_EQ(cascade[1]["position"], 2);

  // Refusals: nothing changes.
  const std::pair<std::string, std::string> refused[] = {
      {"/config/adapters", disk_b},                                   // the name is taken
      {"/config/adapters",  // a directory in use
       R"({"type":"fs","name":"disk-c","base_path":")" + b.string() + R"(/."})"},
      {"/config/adapters", "{"},                                      // not JSON
      {"/config/adapters", R"({"type":"tape"})"},                     // no such type
      {"/config/adapters", R"({"type":"mock","nmae":"x"})"},          // no such field
      {"/config/adapters", R"({"type":"mock","name":"has space"})"},  // a bad name
      {"/config/adapters?position=0", R"({"type":"mock"})"},
      {"/config/adapters?position=4", R"({"type":"mock"})"},
      {"/config/adapters?position=x", R"({"type":"mock"})"},
  };
  for (const auto& [path, body] : refused) {
    auto r = http_->Post(path, admin, body, "application/json");
    EXPECT_TRUE(r->status == 400 || r->status == 409) << path << " " << body << ": " << r->status;
    EXPECT_TRUE(Json(r).contains("error")) << r->body;
  }
  EXPECT_EQ(http_->Post("/config/adapters", admin, disk_b, "application/json")->status, 409);
  EXPECT_EQ(http_->Delete("/config/adapters/nothing", admin)->status, 404);
  EXPECT_EQ(http_->Delete("/config/adapters/disk-a?drain_timeout_s=x", admin)->status, 400);
  EXPECT_EQ(Json(http_->Get("/config/adapters"))["adapters"].size(), 2u);

  // A made name (mock-3: the third adapter given) needs no escaping: the
  // path an operator types removes it.
  auto mock = http_->Post("/config/adapters", admin, R"({"type":"mock"})", "application/json");
  ASSERT_EQ(mock->status, 201) << mock->body;
  EXPECT_EQ(Json(mock)["name"], "mock-3");
  EXPECT_EQ(Json(mock)["position"], 3);
  auto gone = http_->Delete("/config/adapters/mock-3", admin);
  ASSERT_EQ(gone->status, 200) << gone->body;
  EXPECT_EQ(Json(gone)["status"], "removed");

  // A prompt stored now reaches both tiers.
  auto worker = Registered(url_, 21);
  client::KeySpec key;
  key.model_name = "http-test-model";
  for (std::uint32_t t = 0; t < 3 * 256; ++t) key.token_ids.push_back(9000 + t);
  key.end = 3 * 256;
  key.request_id = "cascade";
  std::vector<std::vector<std::byte>> chunks(3, std::vector<std::byte>(worker->ObjectBytes()));
  for (std::size_t c = 0; c < 3; ++c) std::fill(chunks[c].begin(), chunks[c].end(), std::byte(c + 7));
  std::vector<std::span<const std::byte>> spans(chunks.begin(), chunks.end());
  ASSERT_TRUE(worker->Store(key, spans).ok());
  for (int i = 0; i < 1500; ++i) {  // up to 30 s for the write-behind
    cascade = Json(http_->Get("/config/adapters"))["adapters"];
    if (cascade[0]["objects"] == 3 && cascade[1]["objects"] == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(cascade[0]["objects"], 3) << cascade.dump();
  ASSERT_EQ(cascade[1]["objects"], 3) << cascade.dump();

  // The configured tier leaves; L1 is emptied; the prompt comes back from disk-b.
  auto removed = http_->Delete("/config/adapters/disk-a", admin);
  ASSERT_EQ(removed->status, 200) << removed->body;
  EXPECT_EQ(Json(removed)["status"], "removed");
  EXPECT_EQ(Json(removed)["description"], "fs:" + a.string());
  cascade = Json(http_->Get("/config/adapters"))["adapters"];
  ASSERT_EQ(cascade.size(), 1u);
  EXPECT_EQ(cascade[0]["name"], "disk-b");
  ASSERT_EQ(http_->Post("/clear-cache", admin, "", "application/json")->status, 200);
  client::KeySpec lookup = key;
  lookup.request_id = "after-removal";
  EXPECT_EQ(*worker->Lookup(lookup), 3u);
  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(worker->ObjectBytes()));
  std::vector<std::span<std::byte>> out_spans(out.begin(), out.end());
  ASSERT_TRUE(worker->Retrieve(lookup, out_spans).ok());
  EXPECT_EQ(out, chunks);

  const std::string metrics = http_->Get("/metrics")->body;
  EXPECT_NE(metrics.find("lmcache_mp_l2_cascade_changes_total{change=\"added\"} 2"),
            std::string::npos);
  EXPECT_NE(metrics.find("lmcache_mp_l2_cascade_changes_total{change=\"removed\"} 2"),
            std::string::npos);
  EXPECT_NE(metrics.find("l2_name=\"disk-b\""), std::string::npos);
  EXPECT_EQ(metrics.find("l2_name=\"disk-a\""), std::string::npos);
  EXPECT_EQ(Json(http_->Get("/status"))["l2"]["adapters"][0]["name"], "disk-b");
  // The files of the tier that left are untouched: it can join again.
  auto back = http_->Post("/config/adapters", admin,
                          R"({"type":"fs","name":"disk-a","base_path":")" + a.string() + R"("})",
                          "application/json");
  ASSERT_EQ(back->status, 201) << back->body;
  EXPECT_EQ(Json(back)["objects"], 3);
  server_.reset();
  fs::remove(file);
  fs::remove_all(a);
  fs::remove_all(b);
}

}  // namespace
}  // namespace lmcache
