// One soak worker process: a client of the server doing a random mix of
// operations until told to stop (or killed), counting what it verified.
#include <unistd.h>

#include <cstdio>
#include <random>
#include <span>

#include "common/msgpack_codec.h"
#include "lmcache/client.h"
#include "protocol/wire_codec.h"
#include "soak.h"

namespace lmcache::soak {
namespace {

class Worker {
 public:
  Worker(const SoakOptions& o, int slot, std::int64_t instance_id, SoakCounters* counters)
      : o_(o),
        slot_(slot),
        instance_id_(instance_id),
        counters_(counters),
        rng_(o.seed * 7919 + static_cast<std::uint64_t>(getpid())) {}

  Status Connect(const std::string& url) {
    client::ClientOptions options;
    options.url = url;
    options.request_timeout = std::chrono::milliseconds(60'000);
    options.copy_threads = 1;
    LMC_ASSIGN_OR_RETURN(client_, client::Client::Connect(options));
    return Register();
  }

  Status Register() {
    client::EngineContext context;
    context.instance_id = instance_id_;
    context.model_name = "soak-model";
    context.num_layers = o_.num_layers;
    context.hidden_dim_size = o_.hidden;
    LMC_RETURN_IF_ERROR(client_->Register(context).status());
    counters_->registrations.fetch_add(1);
    return Status::Ok();
  }

  void Iterate() {
    const int prompt = static_cast<int>(rng_() % static_cast<unsigned>(o_.prompts));
    const unsigned roll = rng_() % 100;
    Status status;
    if (roll < 35) {
      status = Store(prompt);
    } else if (roll < 75) {
      status = RetrieveAndVerify(prompt);
    } else if (roll < 85) {
      status = AbandonLookup(prompt);
    } else if (roll < 95) {
      status = AbandonStore(prompt);
    } else {
      status = Reregister();
    }
    counters_->iterations.fetch_add(1);
    if (!status.ok()) {
      counters_->unexpected_errors.fetch_add(1);
      std::fprintf(stderr, "[lmcache-soak] worker %d: %s\n", slot_, status.ToString().c_str());
    }
  }

  void Finish() { (void)client_->Unregister(); }

 private:
  client::KeySpec Key(int prompt, int chunks) {
    client::KeySpec key;
    key.model_name = "soak-model";
    key.token_ids = PromptTokens(o_, prompt);
    key.end = static_cast<std::int64_t>(static_cast<std::uint64_t>(chunks) * o_.chunk_size);
    key.request_id = "soak-" + std::to_string(getpid()) + "-" + std::to_string(++request_);
    return key;
  }

  Status Store(int prompt) {
    const int chunks = o_.chunks_per_prompt();
    std::vector<std::vector<std::byte>> data(static_cast<std::size_t>(chunks),
                                             std::vector<std::byte>(o_.object_bytes()));
    std::vector<std::span<const std::byte>> spans;
    for (int c = 0; c < chunks; ++c) {
      ChunkBytes(o_, prompt, c, data[static_cast<std::size_t>(c)].data());
      spans.emplace_back(data[static_cast<std::size_t>(c)]);
    }
    LMC_ASSIGN_OR_RETURN(const client::StoreResult stored, client_->Store(Key(prompt, chunks), spans));
    counters_->stores.fetch_add(1);
    counters_->chunks_stored.fetch_add(stored.stored);
    counters_->chunks_out_of_memory.fetch_add(stored.out_of_memory);
    return Status::Ok();
  }

  Status RetrieveAndVerify(int prompt) {
    client::KeySpec key = Key(prompt, o_.chunks_per_prompt());
    LMC_ASSIGN_OR_RETURN(const std::size_t hits, client_->Lookup(key));
    counters_->lookups.fetch_add(1);
    if (hits > 0) {
      key.end = static_cast<std::int64_t>(hits * o_.chunk_size);
      std::vector<std::vector<std::byte>> out(hits, std::vector<std::byte>(o_.object_bytes()));
      std::vector<std::span<std::byte>> spans(out.begin(), out.end());
      // Every chunk the lookup found is locked for this request: the retrieve must succeed.
      LMC_RETURN_IF_ERROR(client_->Retrieve(key, spans));
      counters_->retrieves.fetch_add(1);
      std::vector<std::byte> expected(o_.object_bytes());
      for (std::size_t c = 0; c < hits; ++c) {
        ChunkBytes(o_, prompt, static_cast<int>(c), expected.data());
        if (out[c] != expected) {
          counters_->corrupt_chunks.fetch_add(1);
          std::fprintf(stderr, "[lmcache-soak] CORRUPT: prompt %d chunk %zu differs\n", prompt, c);
        } else {
          counters_->chunks_verified.fetch_add(1);
          counters_->bytes_verified.fetch_add(o_.object_bytes());
        }
      }
    }
    return client_->EndSession(key.request_id);
  }

  // A lookup nobody retrieves: half the time its locks are freed, half the
  // time left to the session (released when this worker goes away).
  Status AbandonLookup(int prompt) {
    client::KeySpec key = Key(prompt, o_.chunks_per_prompt());
    LMC_ASSIGN_OR_RETURN(const std::size_t hits, client_->Lookup(key));
    counters_->abandoned_lookups.fetch_add(1);
    if (hits > 0 && rng_() % 2 == 0) LMC_RETURN_IF_ERROR(client_->FreeLookupLocks(key));
    return Status::Ok();
  }

  // A prepare_store never committed: the slots stay staged until this worker
  // re-registers, unregisters or dies.
  Status AbandonStore(int prompt) {
    const std::string key = protocol::EncodeIpcKey(Key(prompt, o_.chunks_per_prompt()));
    const std::string instance = msgpk::Encoder().Int(instance_id_).Take();
    counters_->abandoned_stores.fetch_add(1);
    return client_->Call("prepare_store", {key, instance}).status();
  }

  Status Reregister() {
    LMC_RETURN_IF_ERROR(client_->Unregister());
    counters_->reregistrations.fetch_add(1);
    return Register();
  }

  const SoakOptions& o_;
  const int slot_;
  const std::int64_t instance_id_;
  SoakCounters* const counters_;
  std::mt19937_64 rng_;
  std::uint64_t request_ = 0;
  std::unique_ptr<client::Client> client_;
};

}  // namespace

int RunWorker(const SoakOptions& o, const std::string& url, int slot, std::int64_t instance_id,
              SoakCounters* counters) {
  Worker worker(o, slot, instance_id, counters);
  if (Status s = worker.Connect(url); !s.ok()) {
    counters->unexpected_errors.fetch_add(1);
    std::fprintf(stderr, "[lmcache-soak] worker %d: %s\n", slot, s.ToString().c_str());
    return 1;
  }
  while (!counters->stop.load()) worker.Iterate();
  worker.Finish();
  return 0;
}

}  // namespace lmcache::soak
