#include "events/token_bindings.h"

#include <algorithm>
#include <iterator>

namespace lmcache::events {

std::string TokenBindings::KeyOf(const std::string& model, const store::ChunkHash& hash) {
  std::string key(reinterpret_cast<const char*>(hash.data()), hash.size());
  key.append(model);
  return key;
}

void TokenBindings::Bind(const std::string& model, std::span<const store::ChunkHash> hashes,
                         std::size_t first, std::span<const std::uint32_t> tokens,
                         std::size_t chunk_size) {
  if (capacity_bytes_ == 0 || chunk_size == 0 || !active_.load(std::memory_order_relaxed)) return;
  const std::size_t last = std::min(hashes.size(), tokens.size() / chunk_size);
  if (first >= last) return;
  // Built unlocked: a chunk bound already (a re-store, another rank) wastes
  // its copy, which costs less than copying under the lock.
  std::list<Entry> fresh;
  for (std::size_t chunk = first; chunk < last; ++chunk) {
    Entry& entry = fresh.emplace_back();
    entry.key = KeyOf(model, hashes[chunk]);
    entry.binding.parent = chunk == 0 ? std::nullopt : std::optional(hashes[chunk - 1]);
    const auto chunk_tokens = tokens.subspan(chunk * chunk_size, chunk_size);
    entry.binding.tokens =
        std::make_shared<const std::vector<std::uint32_t>>(chunk_tokens.begin(), chunk_tokens.end());
    entry.bytes = sizeof(Entry) + 2 * entry.key.size() + chunk_size * sizeof(std::uint32_t);
  }
  std::list<Entry> unused;  // freed after the lock
  MutexLock lock(&mu_);
  while (!fresh.empty()) {
    const auto entry = fresh.begin();
    if (auto found = index_.find(entry->key); found != index_.end()) {
      lru_.splice(lru_.begin(), lru_, found->second);
      unused.splice(unused.end(), fresh, entry);
      continue;
    }
    bytes_ += entry->bytes;
    lru_.splice(lru_.begin(), fresh, entry);
    index_.emplace(lru_.front().key, lru_.begin());
    while (bytes_ > capacity_bytes_ && lru_.size() > 1) {
      bytes_ -= lru_.back().bytes;
      index_.erase(lru_.back().key);
      unused.splice(unused.end(), lru_, std::prev(lru_.end()));
    }
  }
}

std::vector<std::optional<TokenBinding>> TokenBindings::FindAll(
    const std::string& model, std::span<const store::ChunkHash> hashes) const {
  std::vector<std::string> keys;
  keys.reserve(hashes.size());
  for (const store::ChunkHash& hash : hashes) keys.push_back(KeyOf(model, hash));
  std::vector<std::optional<TokenBinding>> found(hashes.size());
  MutexLock lock(&mu_);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (const auto it = index_.find(keys[i]); it != index_.end()) found[i] = it->second->binding;
  }
  return found;
}

std::optional<TokenBinding> TokenBindings::Find(const std::string& model,
                                                const store::ChunkHash& hash) const {
  return std::move(FindAll(model, std::span(&hash, 1)).front());
}

std::uint64_t TokenBindings::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace lmcache::events
