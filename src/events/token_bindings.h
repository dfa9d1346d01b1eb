// TokenBindings: which tokens each recently stored chunk holds, and its
// parent chunk's hash, keyed by (model, chunk hash).
//
// A chunk's object key carries only its hash, but a router that reads KV
// events needs the tokens (vLLM's BlockStored carries them; Dynamo's and
// llm-d's indexers hash them themselves). A store request names its whole
// prompt, so it binds its chunks here before it commits, and the event of
// an admission takes the binding (the reference's MP_TOKENS bindings). The
// map is bounded in bytes and forgets the least recently bound chunks; a
// chunk admitted without a binding gets no stored event (counted).
//
// Thread-safety: internally synchronised; every method from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "store/object_key.h"

namespace lmcache::events {

struct TokenBinding {
  std::optional<store::ChunkHash> parent;
  // Shared with the map: a lookup copies a pointer under the lock, not the tokens.
  std::shared_ptr<const std::vector<std::uint32_t>> tokens;
};

class TokenBindings {
 public:
  explicit TokenBindings(std::size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // Paused, Bind keeps nothing (KvEvents pauses it until the log's first reader).
  void SetActive(bool on) { active_.store(on, std::memory_order_relaxed); }

  // Binds chunks [first, hashes.size()) of a prompt: `hashes` are the
  // prompt's chunk hashes from chunk 0, `tokens` its tokens. The entries are
  // built before the lock is taken and what the bound pushes out is freed
  // after it is released: the lock only links and unlinks (stores of every
  // lane bind here).
  void Bind(const std::string& model, std::span<const store::ChunkHash> hashes, std::size_t first,
            std::span<const std::uint32_t> tokens, std::size_t chunk_size) LMC_EXCLUDES(mu_);
  // The bindings of `hashes` (nullopt where none), under one lock.
  std::vector<std::optional<TokenBinding>> FindAll(const std::string& model,
                                                   std::span<const store::ChunkHash> hashes) const
      LMC_EXCLUDES(mu_);
  std::optional<TokenBinding> Find(const std::string& model, const store::ChunkHash& hash) const
      LMC_EXCLUDES(mu_);
  std::uint64_t bytes() const LMC_EXCLUDES(mu_);

 private:
  struct Entry {
    std::string key;
    TokenBinding binding;
    std::size_t bytes = 0;
  };
  static std::string KeyOf(const std::string& model, const store::ChunkHash& hash);

  const std::size_t capacity_bytes_;
  std::atomic<bool> active_{true};
  mutable Mutex mu_;
  std::list<Entry> lru_ LMC_GUARDED_BY(mu_);  // most recently bound first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_ LMC_GUARDED_BY(mu_);
  std::size_t bytes_ LMC_GUARDED_BY(mu_) = 0;
};

}  // namespace lmcache::events
