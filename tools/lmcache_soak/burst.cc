// The soak's burst case (issue 19): a scheduler that sends a burst of
// lookups with fresh request ids and never ends them, so that one session
// TTL later they all expire at once, while a probe (another client) times a
// lookup and a `stats` call every few milliseconds through the whole run.
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "lmcache/client.h"
#include "soak.h"
#include "support/server_stats.h"

namespace lmcache::soak {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<client::Client> Connect(const std::string& url) {
  client::ClientOptions options;
  options.url = url;
  options.prefault_pool = false;  // schedulers copy nothing
  options.copy_threads = 1;
  auto connected = client::Client::Connect(options);
  return connected.ok() ? std::move(connected).value() : nullptr;
}

client::KeySpec SchedulerKey(const SoakOptions& o, int prompt, std::string request_id) {
  client::KeySpec key;
  key.model_name = "soak-model";
  key.token_ids = PromptTokens(o, prompt);
  key.end = static_cast<std::int64_t>(key.token_ids.size());
  key.worker_id.reset();
  key.request_id = std::move(request_id);
  return key;
}

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

int RunBurst(const SoakOptions& o, const std::string& url, SoakCounters* counters) {
  auto client = Connect(url);
  if (client == nullptr) return 1;
  const auto start = Clock::now();
  for (int burst = 0; !counters->stop.load(); ++burst) {
    for (int i = 0; i < o.burst_lookups && !counters->stop.load(); ++i) {
      const std::string id = "burst-" + std::to_string(burst) + "-" + std::to_string(i);
      if (!client->Lookup(SchedulerKey(o, i % o.prompts, id)).ok()) {
        counters->unexpected_errors.fetch_add(1);
      }
      counters->burst_lookups.fetch_add(1);
    }
    // The next burst one period after this one started (never ended sessions pile up).
    const auto next = start + std::chrono::duration<double>(o.burst_every_seconds * (burst + 1));
    while (!counters->stop.load() && Clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return 0;
}

int RunProbe(const SoakOptions& o, const std::string& url, SoakCounters* counters) {
  auto client = Connect(url);
  if (client == nullptr) return 1;
  std::vector<double> lookup_ms;
  double stats_max_ms = 0;
  for (std::uint64_t i = 0; !counters->stop.load(); ++i) {
    const auto t0 = Clock::now();
    const std::string id = "probe-" + std::to_string(i);
    const bool looked_up = client->Lookup(SchedulerKey(o, static_cast<int>(i % 7), id)).ok();
    const auto t1 = Clock::now();
    const bool ended = client->EndSession(id).ok();
    const bool stats = tools::ServerStats::Fetch(*client).ok();
    const auto t2 = Clock::now();
    if (!looked_up || !ended || !stats) counters->unexpected_errors.fetch_add(1);
    lookup_ms.push_back(Millis(t1 - t0));
    stats_max_ms = std::max(stats_max_ms, Millis(t2 - t1));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (lookup_ms.empty()) return 0;
  std::sort(lookup_ms.begin(), lookup_ms.end());
  const auto at = [&lookup_ms](double q) {
    return lookup_ms[std::min(lookup_ms.size() - 1, static_cast<std::size_t>(
                                                         q * static_cast<double>(lookup_ms.size())))];
  };
  counters->probe_samples.store(lookup_ms.size());
  counters->probe_lookup_p50_us.store(static_cast<std::uint64_t>(at(0.50) * 1000));
  counters->probe_lookup_p99_us.store(static_cast<std::uint64_t>(at(0.99) * 1000));
  counters->probe_lookup_max_us.store(static_cast<std::uint64_t>(lookup_ms.back() * 1000));
  counters->probe_stats_max_us.store(static_cast<std::uint64_t>(stats_max_ms * 1000));
  return 0;
}

}  // namespace lmcache::soak
