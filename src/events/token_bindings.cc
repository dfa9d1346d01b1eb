#include "events/token_bindings.h"

namespace lmcache::events {

std::string TokenBindings::KeyOf(const std::string& model, const store::ChunkHash& hash) {
  std::string key(reinterpret_cast<const char*>(hash.data()), hash.size());
  key.append(model);
  return key;
}

void TokenBindings::Bind(const std::string& model, std::span<const store::ChunkHash> hashes,
                         std::size_t first, std::span<const std::uint32_t> tokens,
                         std::size_t chunk_size) {
  if (capacity_bytes_ == 0) return;
  MutexLock lock(&mu_);
  for (std::size_t chunk = first; chunk < hashes.size(); ++chunk) {
    if ((chunk + 1) * chunk_size > tokens.size()) break;
    std::string key = KeyOf(model, hashes[chunk]);
    if (auto found = index_.find(key); found != index_.end()) {
      lru_.splice(lru_.begin(), lru_, found->second);  // every rank binds the same chunk
      continue;
    }
    Entry entry;
    entry.binding.parent = chunk == 0 ? std::nullopt : std::optional(hashes[chunk - 1]);
    const auto chunk_tokens = tokens.subspan(chunk * chunk_size, chunk_size);
    entry.binding.tokens.assign(chunk_tokens.begin(), chunk_tokens.end());
    entry.bytes = sizeof(Entry) + 2 * key.size() + chunk_size * sizeof(std::uint32_t);
    entry.key = key;
    bytes_ += entry.bytes;
    lru_.push_front(std::move(entry));
    index_.emplace(std::move(key), lru_.begin());
    while (bytes_ > capacity_bytes_ && lru_.size() > 1) {
      bytes_ -= lru_.back().bytes;
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
  }
}

std::optional<TokenBinding> TokenBindings::Find(const std::string& model,
                                                const store::ChunkHash& hash) const {
  MutexLock lock(&mu_);
  const auto found = index_.find(KeyOf(model, hash));
  if (found == index_.end()) return std::nullopt;
  return found->second->binding;
}

std::uint64_t TokenBindings::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace lmcache::events
