// ChunkSizes: how many tokens make one chunk of each model. A chunk is the
// unit of caching: a prompt's hashes, a key's range, an object's bytes, a KV
// event's block. `--chunk-size` is the default and the smallest allowed;
// `--model-chunk-size MODEL=N` gives a model its own, so models whose KV
// groups need other alignments (hybrid models: 640, 544, ...) share one pool.
//
// A client learns its chunk size from get_chunk_size, which takes no
// argument (spec 3.6) and is answered per endpoint: an endpoint bound for a
// model (`--model-url MODEL=URL`) answers that model's size, every other one
// the default. A key is served only where the size its client learned is the
// size the server hashes it with (CheckServedAt): otherwise the client would
// read hit counts in the wrong unit, and its ranges would cut chunks apart.
//
// Thread-safety: a value; immutable once built, const methods from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::store {

inline constexpr std::int64_t kMaxChunkSize = std::int64_t{1} << 20;
// At most this many models have a chunk size of their own (a peer's
// handshake naming more is refused).
inline constexpr std::size_t kMaxModelChunkSizes = 1024;

class ChunkSizes {
 public:
  using Overrides = std::map<std::string, std::int64_t, std::less<>>;

  ChunkSizes() = default;
  // `overrides` as ParseModelChunkSizes checks them.
  explicit ChunkSizes(std::int64_t default_size, Overrides overrides = {})
      : default_size_(default_size), overrides_(std::move(overrides)) {}

  // Tokens per chunk of `model`.
  std::int64_t For(std::string_view model) const {
    const auto it = overrides_.find(model);
    return it == overrides_.end() ? default_size_ : it->second;
  }
  std::int64_t default_size() const { return default_size_; }
  const Overrides& overrides() const { return overrides_; }

  // What get_chunk_size answers on an endpoint bound for `endpoint_model`
  // (empty: an endpoint of every model).
  std::int64_t Advertised(std::string_view endpoint_model) const {
    return endpoint_model.empty() ? default_size_ : For(endpoint_model);
  }
  // Ok when a key of `model` that arrived on that endpoint is hashed at the
  // size the endpoint advertised; kLayoutMismatch, naming the endpoint to
  // use, otherwise.
  Status CheckServedAt(std::string_view endpoint_model, std::string_view model) const;

  // "256" or "256 (model-a=640, model-b=400)".
  std::string Describe() const;
  bool operator==(const ChunkSizes&) const = default;

 private:
  std::int64_t default_size_ = 256;
  Overrides overrides_;
};

// Checks --chunk-size: 1 to kMaxChunkSize tokens.
Status CheckChunkSize(std::int64_t chunk_size, std::string_view flag);
// A model's own chunk size as another server sends it (a takeover's hello,
// a peer's handshake): a valid model name, a size in [1, kMaxChunkSize].
Status CheckModelChunkSize(const std::string& model, std::int64_t size);
// Parses --model-chunk-size values, each MODEL=N: a valid model name (the
// last '=' splits), each named once, N above `default_size` (the minimum)
// and at most kMaxChunkSize; at most kMaxModelChunkSizes of them.
Result<ChunkSizes::Overrides> ParseModelChunkSizes(const std::vector<std::string>& specs,
                                                   std::int64_t default_size);

}  // namespace lmcache::store
