// What the server-starting phases of lmcache-bench share (l2_phase.cc,
// p2p_phase.cc): their clients, their prompts' keys, page-aligned round
// memory, and waiting for write-behind.
// Thread-safety: plain functions; a RoundMemory has one owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench.h"
#include "lmcache/client.h"

namespace lmcache::bench {

using SteadyTime = std::chrono::steady_clock;

inline double Seconds(SteadyTime::time_point since) {
  return std::chrono::duration<double>(SteadyTime::now() - since).count();
}

// Page-aligned memory for one round's objects (direct I/O needs it).
struct RoundMemory {
  RoundMemory(std::uint64_t objects, std::uint64_t bytes_each);
  ~RoundMemory();
  RoundMemory(const RoundMemory&) = delete;
  RoundMemory& operator=(const RoundMemory&) = delete;
  // Prompt `first + p` of `chunks` chunks in its place, for every prompt the memory holds.
  void Fill(std::uint64_t first, std::uint64_t chunks);
  std::vector<std::span<const std::byte>> Inputs() const;
  std::vector<std::span<std::byte>> Outputs() const;
  // out == in over every object; then overwrites `out`, so that the next
  // round is checked on bytes it wrote itself.
  bool Matches();

  std::uint64_t object_bytes;
  std::byte* in;
  std::byte* out;
  std::uint64_t count;
};

// A client of `url` registered as `instance` with one layer of `hidden`
// float32 values per token (its object: chunk_size * hidden * 4 bytes).
Result<std::unique_ptr<client::Client>> ConnectRegistered(const std::string& url,
                                                          std::int64_t instance,
                                                          std::int64_t hidden);

// The key of prompt `prompt`, `chunks` chunks long (model "bench-l2").
client::KeySpec PromptKey(const BenchOptions& o, std::uint64_t prompt, std::uint64_t chunks);

// Waits until the server has written `objects` objects behind and has nothing queued.
Status WaitWrittenBehind(client::Client& c, double objects);

}  // namespace lmcache::bench
