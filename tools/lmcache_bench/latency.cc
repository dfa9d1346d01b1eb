// Round-trip latencies: the server's ping against a bare ZMQ ROUTER echo of the
// same frames (the transport's floor), lookups of a long, fully cached prompt,
// and lookups of new prompts that share a cached system prompt.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string_view>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "bench.h"
#include "common/msgpack_codec.h"
#include "lmcache/client.h"
#include "lmcache/protocol.h"
#include "support/server_stats.h"

namespace lmcache::bench {
namespace {

using SteadyTime = std::chrono::steady_clock;

double Micros(SteadyTime::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

[[noreturn]] void ServeEcho(const std::string& url) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind(url);
  while (true) {
    zmq::multipart_t message(router);
    message.send(router);  // identity, uid, op, payload: all back as they came
  }
}

// An echo server forked for the run, and a DEALER connected to it.
class EchoPeer {
 public:
  static Result<std::unique_ptr<EchoPeer>> Start() {
    auto peer = std::unique_ptr<EchoPeer>(new EchoPeer());
    peer->url_ = "ipc://" + (std::filesystem::temp_directory_path() /
                             ("lmcache_bench_echo_" + std::to_string(getpid())))
                                .string();
    peer->server_ = fork();
    if (peer->server_ < 0) return Status(ErrorCode::kIoError, "fork failed");
    if (peer->server_ == 0) ServeEcho(peer->url_);
    peer->dealer_.set(zmq::sockopt::linger, 0);
    peer->dealer_.connect(peer->url_);
    for (int i = 0; i < 10; ++i) LMC_RETURN_IF_ERROR(peer->RoundTrip().status());  // warm up
    return peer;
  }
  ~EchoPeer() {
    if (server_ > 0) {
      kill(server_, SIGKILL);
      waitpid(server_, nullptr, 0);
      std::filesystem::remove(url_.substr(6));
    }
  }
  // One round trip of a ping's frames (uid, operation id 22, nil instance id), in microseconds.
  Result<double> RoundTrip() {
    const auto start = SteadyTime::now();
    zmq::multipart_t request;
    request.addstr(msgpk::Encoder().Int(uid_++).Take());
    request.addstr(op_);
    request.addstr(nil_);
    request.send(dealer_);
    zmq::pollitem_t item{dealer_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(10'000)) != 1) {
      return Status(ErrorCode::kTimeout, "echo server did not answer");
    }
    zmq::multipart_t reply(dealer_);
    return Micros(SteadyTime::now() - start);
  }

 private:
  EchoPeer() = default;
  std::string url_;
  pid_t server_ = -1;
  zmq::context_t context_{1};
  zmq::socket_t dealer_{context_, zmq::socket_type::dealer};
  std::int64_t uid_ = 0;
  const std::string op_ = msgpk::Encoder().Int(static_cast<std::int64_t>(Op::kPing)).Take();
  const std::string nil_ = msgpk::Encoder().Nil().Take();
};

// Ping and echo samples alternate, so both see the same machine; the ratio is
// taken per block of samples, and its spread reported.
Status MeasurePingAndEcho(const std::string& url, int samples, Latencies* out) {
  client::ClientOptions options;
  options.url = url;
  LMC_ASSIGN_OR_RETURN(auto client, client::Client::Connect(options));
  LMC_RETURN_IF_ERROR(client->Ping());  // connected before timing
  LMC_ASSIGN_OR_RETURN(auto echo, EchoPeer::Start());
  constexpr int kBlocks = 10;
  const int per_block = std::max(1, samples / kBlocks);
  std::vector<double> pings, echoes, ratios;
  for (int block = 0; block < kBlocks; ++block) {
    std::vector<double> block_pings, block_echoes;
    for (int i = 0; i < per_block; ++i) {
      const auto start = SteadyTime::now();
      LMC_RETURN_IF_ERROR(client->Ping());
      block_pings.push_back(Micros(SteadyTime::now() - start));
      LMC_ASSIGN_OR_RETURN(const double echo_us, echo->RoundTrip());
      block_echoes.push_back(echo_us);
    }
    ratios.push_back(Median(block_pings) / Median(block_echoes));
    pings.insert(pings.end(), block_pings.begin(), block_pings.end());
    echoes.insert(echoes.end(), block_echoes.begin(), block_echoes.end());
  }
  out->ping_p50_us = Median(pings);
  out->zmq_echo_p50_us = Median(echoes);
  out->ping_vs_echo = SpreadOf(ratios);
  return Status::Ok();
}

// Real models' names, not short ones: a name past 15 characters is
// allocated with every copy of an object's key, and the server hashes,
// compares and checks it per key (docs/performance.md, "Lookup").
constexpr const char* kLookupModel = "meta-llama/Llama-3.1-8B-Instruct";
constexpr const char* kSharedPrefixModel = "Qwen/Qwen3-30B-A3B-Instruct-2507";

Result<std::unique_ptr<client::Client>> RegisteredClient(const std::string& url,
                                                         std::int64_t instance,
                                                         const std::string& model) {
  client::ClientOptions options;
  options.url = url;
  // A scheduler's lookups copy nothing: warming the pool's pages in the
  // background would only take a core from the round trips being timed.
  options.prefault_pool = false;
  LMC_ASSIGN_OR_RETURN(auto client, client::Client::Connect(options));
  client::EngineContext context;
  context.instance_id = instance;
  context.model_name = model;
  context.num_layers = 1;
  context.hidden_dim_size = 8;  // 8 KiB objects: the chunks of a long prompt fit any pool
  LMC_RETURN_IF_ERROR(client->Register(context).status());
  return client;
}

// Stores the chunks of `tokens` (zeros) under `model`.
Status StoreTokens(client::Client& client, const BenchOptions& o, const std::string& model,
                   std::vector<std::uint32_t> tokens) {
  client::KeySpec key;
  key.model_name = model;
  const std::uint64_t chunks = tokens.size() / o.chunk_size;
  key.token_ids = std::move(tokens);
  key.end = static_cast<std::int64_t>(chunks * o.chunk_size);
  key.request_id = "lookup-store-" + model;
  std::vector<std::byte> zeros(client.ObjectBytes());
  std::vector<std::span<const std::byte>> spans(chunks, zeros);
  LMC_ASSIGN_OR_RETURN(const client::StoreResult stored, client.Store(key, spans));
  if (stored.stored + stored.already_cached != chunks) return Internal("lookup prompt not stored");
  return client.EndSession(key.request_id);
}

// One lookup (+ wait_prefetch_status) of `key` in a new session; returns its
// time in microseconds and the chunks it found, and frees what it locked.
Result<std::pair<double, std::size_t>> TimedLookup(client::Client& client, client::KeySpec& key,
                                                   const std::string& request) {
  key.request_id = request;  // a new session each time
  const auto start = SteadyTime::now();
  LMC_ASSIGN_OR_RETURN(const std::size_t hits, client.Lookup(key));
  const double us = Micros(SteadyTime::now() - start);
  LMC_RETURN_IF_ERROR(client.FreeLookupLocks(key));
  LMC_RETURN_IF_ERROR(client.EndSession(request));
  return std::make_pair(us, hits);
}

// The mean per event, between two replies, of the microseconds summed at
// `sum` over the events counted at `count`.
double MeanUs(const tools::ServerStats& before, const tools::ServerStats& after,
              std::string_view sum, std::string_view count) {
  const double events = after.Number(count).value_or(0) - before.Number(count).value_or(0);
  if (events <= 0) return 0;
  return (after.Number(sum).value_or(0) - before.Number(sum).value_or(0)) / events;
}

// Lookup of a `lookup_tokens` prompt whose chunks are all cached: the server
// hashes every chunk (or finds its hash cached) and read-locks every object.
// With `stages`, also where the server's time went.
Result<double> LookupP50(const BenchOptions& o, const std::string& url, int samples,
                         LookupStages* stages = nullptr) {
  LMC_ASSIGN_OR_RETURN(auto client, RegisteredClient(url, 8'000'000, kLookupModel));
  const std::vector<std::uint32_t> tokens = PromptTokens(o.lookup_tokens, 424242);
  LMC_RETURN_IF_ERROR(StoreTokens(*client, o, kLookupModel, tokens));
  client::KeySpec key;
  key.model_name = kLookupModel;
  const std::uint64_t chunks = o.lookup_tokens / o.chunk_size;
  key.token_ids = tokens;
  key.end = static_cast<std::int64_t>(chunks * o.chunk_size);
  std::vector<double> times;
  std::optional<tools::ServerStats> before;
  if (stages != nullptr) {
    LMC_ASSIGN_OR_RETURN(before, tools::ServerStats::Fetch(*client));
  }
  for (int i = 0; i < samples; ++i) {
    LMC_ASSIGN_OR_RETURN(const auto sample, TimedLookup(*client, key, "lookup-" + std::to_string(i)));
    if (sample.second != chunks) return Internal("lookup hit " + std::to_string(sample.second));
    times.push_back(sample.first);
  }
  if (stages != nullptr) {
    LMC_ASSIGN_OR_RETURN(const tools::ServerStats after, tools::ServerStats::Fetch(*client));
    stages->server_us =
        MeanUs(*before, after, "operations.lookup.latency_sum_us", "operations.lookup.requests");
    stages->decode_us =
        MeanUs(*before, after, "lookup.decode_latency.sum_us", "lookup.decode_latency.count");
    stages->hash_us =
        MeanUs(*before, after, "lookup.hash_latency.sum_us", "lookup.hash_latency.count");
    stages->lock_us =
        MeanUs(*before, after, "lookup.lock_latency.sum_us", "lookup.lock_latency.count");
  }
  (void)client->Unregister();
  return Median(times);
}

// New prompts of `lookup_tokens` whose first 80 % (whole chunks) is a shared
// system prompt stored before; every sample has a suffix never seen before.
Status SharedPrefixLookups(const BenchOptions& o, const std::string& url, int samples,
                           Latencies* out) {
  LMC_ASSIGN_OR_RETURN(auto client, RegisteredClient(url, 8'000'001, kSharedPrefixModel));
  const std::uint64_t chunks = o.lookup_tokens / o.chunk_size;
  const std::uint64_t shared_chunks = std::max<std::uint64_t>(1, chunks * 8 / 10);
  const std::uint64_t shared_tokens = shared_chunks * o.chunk_size;
  const std::vector<std::uint32_t> system_prompt = PromptTokens(shared_tokens, 515151);
  LMC_RETURN_IF_ERROR(StoreTokens(*client, o, kSharedPrefixModel, system_prompt));
  std::vector<double> times;
  std::size_t hits = 0;
  for (int i = 0; i < samples; ++i) {
    client::KeySpec key;
    key.model_name = kSharedPrefixModel;
    key.token_ids = system_prompt;
    const std::vector<std::uint32_t> suffix =
        PromptTokens(chunks * o.chunk_size - shared_tokens, 900'000 + static_cast<std::uint64_t>(i));
    key.token_ids.insert(key.token_ids.end(), suffix.begin(), suffix.end());
    key.end = static_cast<std::int64_t>(chunks * o.chunk_size);
    LMC_ASSIGN_OR_RETURN(const auto sample, TimedLookup(*client, key, "shared-" + std::to_string(i)));
    times.push_back(sample.first);
    hits += sample.second;
  }
  (void)client->Unregister();
  out->shared_prefix_lookup_p50_us = Median(times);
  out->shared_prefix_hit_fraction =
      static_cast<double>(hits) / static_cast<double>(chunks * static_cast<std::uint64_t>(samples));
  return Status::Ok();
}

}  // namespace

Result<Latencies> MeasureLatencies(const BenchOptions& o, const std::string& url) {
  Latencies result;
  LMC_RETURN_IF_ERROR(MeasurePingAndEcho(url, o.latency_samples, &result));
  const int lookups = std::max(5, o.latency_samples / 20);
  LMC_ASSIGN_OR_RETURN(result.lookup_p50_us, LookupP50(o, url, lookups, &result.lookup_stages));
  LMC_RETURN_IF_ERROR(SharedPrefixLookups(o, url, lookups, &result));
  return result;
}

Result<double> MeasureLookupP50(const BenchOptions& o, const std::string& url) {
  return LookupP50(o, url, std::max(5, o.latency_samples / 20));
}

}  // namespace lmcache::bench
