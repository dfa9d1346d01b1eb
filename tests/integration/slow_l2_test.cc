// A slow L2 tier stalls nobody (issue 20), through the real server binary
// with its default worker counts (one CPU-pool thread) and the client:
// eight schedulers wait (wait_prefetch_status, as Client::Lookup and the
// reference's scheduler do) on prompts that load from an L2 tier needing
// about a second each, while another scheduler looks up a prompt L1
// holds and pings. Before deferred replies, each wait held the CPU pool's
// only thread, and the other scheduler's lookup took 2004 ms.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "fakes/client_stats.h"
#include "fakes/server_process.h"
#include "lmcache/client.h"

namespace lmcache {
namespace {

namespace fs = std::filesystem;
using client::Client;
using client::ClientOptions;
using testing::ServerProcess;
using testing::StatsField;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kChunk = 256;
constexpr std::size_t kChunks = 4;
constexpr int kWaiters = 8;
const char* const kModel = "slow-l2/model";
// 2 layers x 64 hidden: 128 KiB per chunk, 512 KiB a prompt; at 0.5 MB/s a
// prompt loads in about a second (and storing the eight takes eight).
constexpr const char* kSlowMock = R"({"type":"mock","mock_bandwidth_gb":0.0005})";

std::vector<std::uint32_t> Tokens(std::uint32_t seed) {
  std::vector<std::uint32_t> tokens(kChunk * kChunks);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = seed * 1'000'003u + static_cast<std::uint32_t>(i);
  }
  return tokens;
}

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

class SlowL2Test : public ::testing::Test {
 protected:
  SlowL2Test() {
    url_ = "ipc://" + (fs::temp_directory_path() /
                       ("lmcache_slow_l2_" + std::to_string(::getpid()) + ".sock"))
                          .string();
  }
  std::unique_ptr<ServerProcess> Start() {
    // Default --max-workers: one thread per pool, as a fresh deployment runs.
    auto server = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--l1-size-gb", "0.25", "--url", url_, "--port", "0", "--prefault-threads", "1",
        "--l2-adapter", kSlowMock});
    EXPECT_TRUE(server->WaitForLog("ready", std::chrono::seconds(60))) << server->Log();
    return server;
  }
  std::unique_ptr<Client> Worker() { return testing::ConnectWorker(url_, 1, kModel, 2, 64); }
  // A scheduler: looks up, copies nothing.
  std::unique_ptr<Client> Scheduler() {
    ClientOptions options;
    options.url = url_;
    options.prefault_pool = false;
    options.request_timeout = std::chrono::milliseconds(60'000);
    auto c = Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  static client::KeySpec Key(std::uint32_t prompt, const std::string& request) {
    client::KeySpec key;
    key.model_name = kModel;
    key.token_ids = Tokens(prompt);
    key.end = static_cast<std::int64_t>(kChunk * kChunks);
    key.request_id = request;
    return key;
  }
  static void StorePrompt(Client& c, std::uint32_t prompt) {
    std::vector<std::vector<std::byte>> chunks(kChunks, std::vector<std::byte>(c.ObjectBytes()));
    for (std::size_t i = 0; i < kChunks; ++i) {
      std::fill(chunks[i].begin(), chunks[i].end(), std::byte(static_cast<unsigned char>(prompt + i)));
    }
    std::vector<std::span<const std::byte>> in(chunks.begin(), chunks.end());
    ASSERT_TRUE(c.Store(Key(prompt, "store-" + std::to_string(prompt)), in).ok());
  }
  std::string url_;
};

TEST_F(SlowL2Test, SchedulersWaitingOnASlowTierStallNoOtherScheduler) {
  auto server = Start();
  auto worker = Worker();
  ASSERT_NE(worker, nullptr);
  // The slow prompts go to L2 (about 2 s each way at the mock's bandwidth)
  // and then out of L1; the fast one is stored after the clear and stays.
  for (std::uint32_t p = 1; p <= kWaiters; ++p) StorePrompt(*worker, p);
  for (int i = 0; i < 6000 && StatsField(*worker, {"l2", "store", "stored"}) < kWaiters * kChunks; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(StatsField(*worker, {"l2", "store", "stored"}), kWaiters * kChunks) << server->Log();
  ASSERT_TRUE(worker->Call("clear", {}).ok());
  ASSERT_EQ(StatsField(*worker, {"l1", "resident_objects"}), 0u);
  constexpr std::uint32_t kFastPrompt = 100;
  StorePrompt(*worker, kFastPrompt);

  // Eight schedulers each wait on their slow prompt's prefetch.
  std::atomic<int> loaded{0};
  std::atomic<int> done{0};
  std::vector<std::thread> waiters;
  for (int w = 0; w < kWaiters; ++w) {
    waiters.emplace_back([&, w] {
      auto scheduler = Scheduler();
      if (scheduler == nullptr) return;
      auto hits = scheduler->Lookup(Key(static_cast<std::uint32_t>(w + 1), "slow-" + std::to_string(w)));
      if (hits.ok() && *hits == kChunks) loaded.fetch_add(1);
      done.fetch_add(1);
    });
  }
  // Another scheduler, once all eight are parked and until the first
  // prefetch lands: lookups of the prompt L1 holds, and pings, back to back.
  auto other = Scheduler();
  ASSERT_NE(other, nullptr);
  bool all_parked = false;
  for (int i = 0; i < 3000 && !all_parked && done.load() == 0; ++i) {
    all_parked = StatsField(*other, {"parked", "requests"}) == kWaiters;
    if (!all_parked) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<double> lookup_ms;
  std::vector<double> ping_ms;
  const auto measured_from = Clock::now();
  for (int i = 0; all_parked && done.load() == 0; ++i) {
    const auto t0 = Clock::now();
    auto hits = other->Lookup(Key(kFastPrompt, "fast-" + std::to_string(i)));
    const auto t1 = Clock::now();
    ASSERT_TRUE(hits.ok()) << hits.status().ToString();
    EXPECT_EQ(*hits, kChunks);
    ASSERT_TRUE(other->EndSession("fast-" + std::to_string(i)).ok());
    const auto t2 = Clock::now();
    ASSERT_TRUE(other->Call("ping", {}).ok());
    const auto t3 = Clock::now();
    lookup_ms.push_back(Millis(t1 - t0));
    ping_ms.push_back(Millis(t3 - t2));
  }
  // How long the tier kept the eight waiting while the other scheduler ran:
  // the yardstick for its calls. Both sides slow down alike on a loaded
  // machine or under a sanitizer, so the bounds are fractions of it, not
  // wall-clock figures (the mock's bandwidth is wall-clock, the server's
  // own work is not).
  const double waited_ms = Millis(Clock::now() - measured_from);
  for (std::thread& t : waiters) t.join();

  const double lookup_p99 = Percentile(lookup_ms, 0.99);
  const double ping_p99 = Percentile(ping_ms, 0.99);
  std::printf("while %d schedulers waited %.0f ms: other lookup p50 %.2f p99 %.2f max %.2f ms "
              "(%zu); ping p50 %.2f p99 %.2f ms\n",
              kWaiters, waited_ms, Percentile(lookup_ms, 0.5), lookup_p99,
              *std::max_element(lookup_ms.begin(), lookup_ms.end()), lookup_ms.size(),
              Percentile(ping_ms, 0.5), ping_p99);
  EXPECT_EQ(loaded.load(), kWaiters) << "every waiting scheduler gets its whole prompt";
  EXPECT_TRUE(all_parked) << "the eight waits were never parked at once";
  EXPECT_GE(lookup_ms.size(), 100u) << "the waits ended before the other scheduler could measure";
  // Before deferred replies a lookup waited out a whole load (2004 ms, longer
  // than this window); now a call costs a small fraction of the window.
  EXPECT_LT(lookup_p99, waited_ms / 10) << "a lookup waited on the slow tier";
  EXPECT_LT(ping_p99, waited_ms / 10) << "a ping waited on the slow tier";
  EXPECT_EQ(StatsField(*other, {"parked", "requests"}), 0u);
  kill(server->pid(), SIGTERM);
  EXPECT_EQ(server->WaitExit(std::chrono::seconds(30)), 0) << server->Log();
}

}  // namespace
}  // namespace lmcache
