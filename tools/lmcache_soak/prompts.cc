// Deterministic prompts and chunk contents of the soak.
#include <cstring>

#include "soak.h"

namespace lmcache::soak {
namespace {

// A chunk's identity: its group's system prompt for a shared chunk, else its prompt.
std::uint64_t ChunkIdentity(const SoakOptions& o, int prompt, int chunk) {
  if (chunk < o.shared_chunks) {
    return (0x5eedull << 40) ^ (static_cast<std::uint64_t>(prompt % o.groups) << 16) ^
           static_cast<std::uint64_t>(chunk);
  }
  return (0xf00dull << 40) ^ (static_cast<std::uint64_t>(prompt) << 16) ^
         static_cast<std::uint64_t>(chunk);
}

}  // namespace

std::vector<std::uint32_t> PromptTokens(const SoakOptions& o, int prompt) {
  std::vector<std::uint32_t> tokens;
  tokens.reserve(static_cast<std::size_t>(o.chunks_per_prompt()) * o.chunk_size);
  for (int c = 0; c < o.chunks_per_prompt(); ++c) {
    const std::uint64_t identity = ChunkIdentity(o, prompt, c);
    for (std::uint64_t t = 0; t < o.chunk_size; ++t) {
      tokens.push_back(static_cast<std::uint32_t>((identity * 2654435761u + t * 40503u) % 128000));
    }
  }
  return tokens;
}

void ChunkBytes(const SoakOptions& o, int prompt, int chunk, std::byte* out) {
  std::uint64_t x = ChunkIdentity(o, prompt, chunk) * 0x9e3779b97f4a7c15ull + 1;
  const std::uint64_t bytes = o.object_bytes();
  for (std::uint64_t i = 0; i < bytes; i += 8) {
    x ^= x << 13;  // xorshift: no two chunks alike
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out + i, &x, 8);
  }
}

}  // namespace lmcache::soak
