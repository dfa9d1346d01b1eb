// KvBackend and KvContext: the device side of the CUDA-IPC path, behind one
// interface with two implementations: CUDA (cuda_backend.cc, built with the
// toolkit) and the host emulation (emulated_backend.cc), in which "device
// memory" is shared memory mapped by the worker and the server, events are
// words in shared memory, and the copies run csrc/kv_index.h's math on a CPU
// thread.
//
// A KvContext is one registration's view of a worker's paged caches: the
// allocations its IPC handles name, mapped once each (reference-counted per
// allocation across registrations), and one stream on which its transfers run
// in order. A transfer waits for the engine's event before it touches the
// cache (vllm #45704), copies chunk by chunk between the cache and L1 objects,
// then completes the server's event and calls `done` on a host thread. The
// server's event handle is returned at once (spec 10.2-10.3).
//
// Thread-safety: a backend may be called from any thread. A context's
// Enqueue may be called from any thread; its `done` callbacks run on the
// context's stream thread (emulation) or the CUDA runtime's callback thread,
// one at a time and in stream order, and must not block or call back into
// the context. A context is destroyed only after Drain() returned true: its
// mappings are closed then, never while a copy may still use them (#4676).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu/kv_layout.h"
#include "lmcache/status.h"

namespace lmcache::gpu {

inline constexpr std::size_t kEventHandleBytes = 64;  // sizeof(cudaIpcEventHandle_t)
using EventHandle = std::array<std::uint8_t, kEventHandleBytes>;

enum class Direction : std::uint8_t {
  kStore,     // gather: paged cache -> L1 object
  kRetrieve,  // scatter: L1 object -> paged cache
};

// One chunk of a transfer: its blocks, its tokens, and its L1 object.
struct ChunkTransfer {
  std::vector<std::int32_t> block_ids;  // the chunk's blocks (checked by CheckBlockIds)
  std::int64_t tokens = 0;              // <= the chunk size
  std::int64_t skip_tokens = 0;         // retrieve: leave the first tokens' blocks alone
  std::byte* object = nullptr;          // the L1 object's bytes (in the pool)
};

class KvContext {
 public:
  virtual ~KvContext() = default;
  // Queues one transfer; returns the server event's handle. `done(status)`
  // runs after the last copy (OK) or after a failure (no copy of a failed
  // transfer may be trusted: a store's objects must not be published).
  virtual Result<EventHandle> Enqueue(Direction direction, const EventHandle& engine_event,
                                      std::vector<ChunkTransfer> chunks,
                                      std::function<void(const Status&)> done) = 0;
  // Waits up to `timeout` for every queued transfer to finish; true when none is left.
  virtual bool Drain(std::chrono::milliseconds timeout) = 0;
  virtual std::size_t in_flight() const = 0;
};

struct BackendStats {
  std::uint64_t mapped_allocations = 0;  // open IPC memory mappings now
  std::uint64_t mapped_bytes = 0;
};

class KvBackend {
 public:
  virtual ~KvBackend() = default;
  virtual const char* name() const = 0;
  // OK when a device can be used; asked at each registration, never at startup.
  virtual Status CheckAvailable() = 0;
  // Maps `layout`'s tensors and makes a stream for objects of `chunk_tokens`
  // tokens. `l1` is the pool the objects live in (the CUDA backend registers
  // it as pinned memory on first use).
  virtual Result<std::unique_ptr<KvContext>> Open(const KvLayout& layout, std::int64_t chunk_tokens,
                                                  std::span<std::byte> l1) = 0;
  virtual BackendStats Stats() const = 0;
};

struct BackendOptions {
  std::chrono::milliseconds event_timeout{10'000};  // emulation: longest wait for an engine event
};

// "cuda" or "emulated"; kInvalidConfig for another name or cuda not built.
Result<std::unique_ptr<KvBackend>> MakeKvBackend(const std::string& name, const BackendOptions& options);

}  // namespace lmcache::gpu
