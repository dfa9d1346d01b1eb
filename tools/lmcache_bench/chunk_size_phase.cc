#include "chunk_size_phase.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "lmcache/client.h"
#include "support/local_server.h"

namespace lmcache::bench {
namespace {

constexpr std::size_t kSizes = std::size(kPhaseChunkSizes);
constexpr std::size_t kIndexOf256 = 2;
constexpr std::uint64_t kBytesPerToken = 1024;  // [2, 1, chunk, 256] bfloat16

std::string ModelOf(std::uint64_t chunk) { return "bench-chunk-" + std::to_string(chunk); }

double NanosPerToken(std::chrono::steady_clock::duration d, std::uint64_t tokens) {
  return std::chrono::duration<double, std::nano>(d).count() / static_cast<double>(tokens);
}

// One model's worker and scheduler: connected to its endpoint (whose
// get_chunk_size answers its size) and registered.
struct SizeClient {
  std::uint64_t chunk = 0;
  std::unique_ptr<client::Client> client;
};

Result<SizeClient> Connect(const std::string& url, std::uint64_t chunk, int index) {
  client::ClientOptions options;
  options.url = url;
  LMC_ASSIGN_OR_RETURN(auto c, client::Client::Connect(options));
  LMC_ASSIGN_OR_RETURN(const std::int64_t advertised, c->GetChunkSize());
  if (advertised != static_cast<std::int64_t>(chunk)) {
    return Internal(url + " answers get_chunk_size " + std::to_string(advertised) + ", not " +
                    std::to_string(chunk));
  }
  client::EngineContext context;
  context.instance_id = 7'000'000 + 100 * getpid() + index;
  context.model_name = ModelOf(chunk);
  context.num_layers = 1;
  context.hidden_dim_size = kBytesPerToken / 4;
  LMC_RETURN_IF_ERROR(c->Register(context).status());
  // Timed copies take no page fault (each client maps the pool itself).
  if (!c->WaitPoolWarm(std::chrono::minutes(2))) {
    return Status(ErrorCode::kTimeout, url + ": the pool was not mapped within 2 minutes");
  }
  return SizeClient{chunk, std::move(c)};
}

// Stores, then looks up, a new prompt of `tokens` at one size; appends the
// two per-token costs.
Status StoreAndLookUp(SizeClient& s, std::uint64_t tokens, std::uint64_t prompt,
                      const std::vector<std::byte>& zeros, double* store_ns, double* lookup_ns) {
  client::KeySpec key;
  key.model_name = ModelOf(s.chunk);
  key.token_ids = PromptTokens(tokens, prompt);
  const std::uint64_t chunks = tokens / s.chunk;
  key.end = static_cast<std::int64_t>(chunks * s.chunk);
  key.request_id = "chunk-store-" + std::to_string(prompt);
  std::vector<std::span<const std::byte>> spans(chunks,
                                                std::span(zeros).first(s.client->ObjectBytes()));
  auto start = std::chrono::steady_clock::now();
  LMC_ASSIGN_OR_RETURN(const client::StoreResult stored, s.client->Store(key, spans));
  *store_ns = NanosPerToken(std::chrono::steady_clock::now() - start, chunks * s.chunk);
  if (stored.stored != chunks)
    return Internal(key.model_name + ": a new prompt was not stored whole");
  LMC_RETURN_IF_ERROR(s.client->EndSession(key.request_id));
  key.request_id = "chunk-lookup-" + std::to_string(prompt);
  start = std::chrono::steady_clock::now();
  LMC_ASSIGN_OR_RETURN(const std::size_t hits, s.client->Lookup(key));
  *lookup_ns = NanosPerToken(std::chrono::steady_clock::now() - start, chunks * s.chunk);
  if (hits != chunks) return Internal(key.model_name + ": the lookup hit " + std::to_string(hits));
  LMC_RETURN_IF_ERROR(s.client->FreeLookupLocks(key));
  return s.client->EndSession(key.request_id);
}

}  // namespace

namespace {

std::vector<double> RoundRatios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out;
  for (std::size_t r = 0; r < std::min(a.size(), b.size()); ++r) out.push_back(a[r] / b[r]);
  return out;
}

}  // namespace

std::vector<double> ChunkSizeFigures::store_1_vs_256() const {
  return RoundRatios(store_ns_per_token[0], store_ns_per_token[kIndexOf256]);
}

std::vector<double> ChunkSizeFigures::lookup_1_vs_256() const {
  return RoundRatios(lookup_ns_per_token[0], lookup_ns_per_token[kIndexOf256]);
}

Result<ChunkSizeFigures> MeasureChunkSizePhase(const BenchOptions& o, const std::string& binary) {
  const std::uint64_t tokens = o.chunk_phase_tokens / 2048 * 2048;  // whole chunks at every size
  if (tokens == 0) return InvalidArgument("--chunk-phase-tokens must be at least 2048");
  // Every round's prompts stay resident (a store that evicts would time the
  // eviction): at chunk size 1 an object of 1 KiB takes a 4 KiB slot.
  const double round_bytes = static_cast<double>(tokens * kBytesPerToken) * (4 + kSizes);
  const double pool_gb =
      std::max(1.0, 1.25 * round_bytes * (o.rounds + 1) / static_cast<double>(1ull << 30));
  const std::string dir = std::filesystem::temp_directory_path().string();
  std::vector<std::string> args = {"--l1-size-gb",       std::to_string(pool_gb),
                                   "--log-level",        "warn",
                                   "--prefault-threads", "1",
                                   "--chunk-size",       "1"};
  std::vector<std::string> urls(kSizes);
  for (std::size_t i = 1; i < kSizes; ++i) {
    const std::string model = ModelOf(kPhaseChunkSizes[i]);
    urls[i] = "ipc://" + dir + "/lmcache_bench_chunk_" + std::to_string(getpid()) + "_" +
              std::to_string(kPhaseChunkSizes[i]) + ".sock";
    args.insert(args.end(),
                {"--model-chunk-size", model + "=" + std::to_string(kPhaseChunkSizes[i]),
                 "--model-url", model + "=" + urls[i]});
  }
  LMC_ASSIGN_OR_RETURN(auto server, tools::LocalServer::Start(binary, "lmcache_bench_chunk", args));
  urls[0] = server->url();
  std::vector<SizeClient> clients;
  for (std::size_t i = 0; i < kSizes; ++i) {
    LMC_ASSIGN_OR_RETURN(SizeClient c, Connect(urls[i], kPhaseChunkSizes[i], static_cast<int>(i)));
    clients.push_back(std::move(c));
  }
  const std::vector<std::byte> zeros(2048 * kBytesPerToken);
  ChunkSizeFigures figures;
  figures.tokens = tokens;
  figures.store_ns_per_token.resize(kSizes);
  figures.lookup_ns_per_token.resize(kSizes);
  std::uint64_t prompt = 31'000'000;
  double store_ns = 0;
  double lookup_ns = 0;
  for (SizeClient& c : clients) {  // untimed: first touches, connections warm
    LMC_RETURN_IF_ERROR(StoreAndLookUp(c, tokens, prompt++, zeros, &store_ns, &lookup_ns));
  }
  for (int round = 0; round < o.rounds; ++round) {
    for (std::size_t k = 0; k < kSizes; ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(round)) % kSizes;  // rotated
      LMC_RETURN_IF_ERROR(
          StoreAndLookUp(clients[i], tokens, prompt++, zeros, &store_ns, &lookup_ns));
      figures.store_ns_per_token[i].push_back(store_ns);
      figures.lookup_ns_per_token[i].push_back(lookup_ns);
    }
  }
  for (SizeClient& c : clients) (void)c.client->Unregister();
  return figures;
}

}  // namespace lmcache::bench
