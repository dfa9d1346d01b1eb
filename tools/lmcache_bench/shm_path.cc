// The shared-memory path, end to end through the server's RPCs:
// prepare_store -> copy into the slots -> commit_store, then
// lookup -> wait_prefetch_status -> prepare_retrieve -> copy out -> commit_retrieve.
#include <memory>

#include "paths.h"
#include "lmcache/client.h"
#include "phased_workers.h"

namespace lmcache::bench {
namespace {

constexpr std::int64_t kInstanceBase = 7'000'000;

struct ShmWorker {
  std::unique_ptr<client::Client> client;
  PromptBuffers buffers;
  int round = 0;
};

client::KeySpec PromptKey(const BenchOptions& o, std::uint64_t prompt, const std::string& request) {
  client::KeySpec key;
  key.model_name = "bench-shm";
  key.token_ids = PromptTokens(o.tokens_per_prompt, prompt);
  key.start = 0;
  key.end = static_cast<std::int64_t>(o.chunks_per_prompt() * o.chunk_size);
  key.request_id = request;
  return key;
}

// "s12", "r12": request ids of a prompt's store and retrieve. Built piecewise:
// a one-character literal + to_string trips GCC 12's -Wrestrict false positive.
std::string RequestId(char tag, std::uint64_t prompt) {
  std::string id(1, tag);
  id += std::to_string(prompt);
  return id;
}

std::uint64_t PromptId(const BenchOptions& o, int round, int worker, int p) {
  return (static_cast<std::uint64_t>(round) * static_cast<std::uint64_t>(o.workers) +
          static_cast<std::uint64_t>(worker)) *
             static_cast<std::uint64_t>(o.prompts_per_worker) +
         static_cast<std::uint64_t>(p) + 1;
}

}  // namespace

Result<std::unique_ptr<BenchPath>> StartShmPath(const BenchOptions& o, const std::string& url,
                                                int server_pid) {
  if (o.bytes_per_token % 4 != 0)
    return InvalidArgument("--bytes-per-token must be a multiple of 4");
  auto state = std::make_shared<ShmWorker>();  // each forked worker gets its own copy
  auto setup = [&o, &url, state](int w) -> Status {
    client::ClientOptions options;
    options.url = url;
    options.copy_threads = 1;  // one process per worker already uses every core
    LMC_ASSIGN_OR_RETURN(state->client, client::Client::Connect(options));
    client::EngineContext context;
    context.instance_id = kInstanceBase + w;
    context.model_name = "bench-shm";
    context.num_layers = 1;
    context.hidden_dim_size =
        static_cast<std::int64_t>(o.bytes_per_token / 4);  // [2,1,chunk,h] bf16
    LMC_RETURN_IF_ERROR(state->client->Register(context).status());
    if (state->client->ObjectBytes() != o.object_bytes()) return Internal("unexpected object size");
    state->buffers = MakePromptBuffers(o, w);
    // The client maps the pool's pages in the background; the rounds measure
    // the steady state, not the first touch of each page.
    if (!state->client->WaitPoolWarm(std::chrono::minutes(5))) {
      return Internal("the client did not map the pool's pages within 5 minutes");
    }
    return Status::Ok();
  };
  auto store = [&o, state](int w) -> Status {
    for (int p = 0; p < o.prompts_per_worker; ++p) {
      const std::uint64_t prompt = PromptId(o, state->round, w, p);
      std::vector<std::span<const std::byte>> chunks;
      for (std::uint64_t c = 0; c < o.chunks_per_prompt(); ++c) {
        chunks.emplace_back(state->buffers.data[p].data() + c * o.object_bytes(), o.object_bytes());
      }
      LMC_ASSIGN_OR_RETURN(
          const client::StoreResult stored,
          state->client->Store(PromptKey(o, prompt, RequestId('s', prompt)), chunks));
      if (stored.stored != chunks.size()) {
        return Internal("stored " + std::to_string(stored.stored) + " of " +
                        std::to_string(chunks.size()) + " chunks (pool too small?)");
      }
      (void)state->client->EndSession(RequestId('s', prompt));
    }
    return Status::Ok();
  };
  auto retrieve = [&o, state](int w) -> Status {
    for (int p = 0; p < o.prompts_per_worker; ++p) {
      const std::uint64_t prompt = PromptId(o, state->round, w, p);
      const std::string request = RequestId('r', prompt);
      client::KeySpec key = PromptKey(o, prompt, request);
      LMC_ASSIGN_OR_RETURN(const std::size_t hits, state->client->Lookup(key));
      if (hits != o.chunks_per_prompt())
        return Internal("lookup found " + std::to_string(hits) + " chunks");
      std::vector<std::span<std::byte>> out;
      for (std::uint64_t c = 0; c < o.chunks_per_prompt(); ++c) {
        out.emplace_back(state->buffers.out[p].data() + c * o.object_bytes(), o.object_bytes());
      }
      LMC_RETURN_IF_ERROR(state->client->Retrieve(key, out));
      (void)state->client->EndSession(request);
    }
    state->round += 1;
    return Status::Ok();
  };
  auto verify = [state](int) { return state->buffers.Verify(); };
  LMC_ASSIGN_OR_RETURN(auto workers,
                       PhasedWorkers::Start(o.workers, setup, {store, retrieve, verify}));

  client::ClientOptions admin_options;
  admin_options.url = url;
  LMC_ASSIGN_OR_RETURN(std::shared_ptr<client::Client> admin,
                       client::Client::Connect(admin_options));
  // Between rounds the pool is emptied (every lock is released by then).
  return std::unique_ptr<BenchPath>(std::make_unique<PhasedPath>(
      o, std::move(workers), [admin] { return admin->Call("clear", {}).status(); }, nullptr,
      server_pid));
}

}  // namespace lmcache::bench
