// BLAKE3-256: the default BLAKE3 hash with a 32-byte digest (and its keyed mode).
//
// A thin C++ face over the official BLAKE3 C implementation (built from the
// sources Debian's librust-blake3-dev installs, cmake/LmcDependencies.cmake),
// with its SSE2/SSE4.1/AVX2/AVX-512 kernels chosen at run time. LMCache names
// KV chunks by BLAKE3 digests of their token ids, so the server must produce
// bit-identical digests; the tests check them against the b3sum tool.
// Thread-safety: a Blake3Hasher is a plain value: not synchronised; distinct
// hashers may be used concurrently. The free functions are reentrant.
#pragma once

#include <blake3.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace lmcache {

using Blake3Digest = std::array<std::uint8_t, 32>;

// Incremental hasher: Update() any number of times with any split of the input, then
// Finalize(). The digest depends only on the concatenated input, never on how it was split.
class Blake3Hasher {
 public:
  Blake3Hasher() { blake3_hasher_init(&state_); }
  // BLAKE3's keyed mode (a MAC / PRF under a secret 32-byte key).
  explicit Blake3Hasher(const Blake3Digest& key) { blake3_hasher_init_keyed(&state_, key.data()); }

  void Update(std::span<const std::uint8_t> data) { Update(data.data(), data.size()); }
  void Update(const void* data, std::size_t size) { blake3_hasher_update(&state_, data, size); }

  // Finalize does not modify the state: more Update() calls may follow, and a later
  // Finalize() covers everything fed so far.
  Blake3Digest Finalize() const {
    Blake3Digest digest;
    blake3_hasher_finalize(&state_, digest.data(), digest.size());
    return digest;
  }

  // Back to the empty-input state, as if freshly constructed.
  void Reset() { blake3_hasher_reset(&state_); }

 private:
  blake3_hasher state_;
};

// One-shot digest of `data`.
Blake3Digest Blake3(std::span<const std::uint8_t> data);

// Lowercase hex, 64 characters (the format b3sum prints).
std::string ToHex(const Blake3Digest& digest);

}  // namespace lmcache
