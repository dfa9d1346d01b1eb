// KvBackend and KvContext: the device side of the CUDA-IPC path, behind one
// interface with two implementations: CUDA (cuda_backend.cc, built with the
// toolkit) and the host emulation (emulated_backend.cc), in which "device
// memory" is shared memory mapped by the worker and the server, events are
// words in shared memory, and the copies run csrc/kv_index.h's math on a CPU
// thread.
//
// A KvContext is one registration's view of a worker's paged caches: the
// allocations its IPC handles name, mapped once each (reference-counted per
// allocation across registrations) and every layer's view bounded by the
// mapping's real size, and one queue on which its transfers run in order.
// A transfer first waits, on the context's own host thread, for the engine's
// event (vllm #45704), at most BackendOptions::event_timeout: an engine
// killed mid-step never completes its event, and its transfer then fails
// without a byte copied, so nothing of a dead engine stays blocked on a
// device stream. Then it copies chunk by chunk between the cache and L1
// objects (the plan's groups, transfer_plan.h), calls `done` on a host
// thread and then completes the server's event (so a store's objects are
// published before the engine can see it complete). The server's event
// handle is returned at once (spec 10.2-10.3).
//
// L1 objects are named by their offset in the pool the context was opened
// with (a view of the pool, never a raw pointer from the request path);
// an offset outside it fails the transfer.
//
// Thread-safety: a backend may be called from any thread. A context's
// Enqueue and FailedEvent may be called from any thread; its `done`
// callbacks run on the context's thread (emulation) or the CUDA runtime's
// callback thread, one at a time and in queue order, and must not block or
// call back into the context. A context is destroyed only after Drain()
// returned true: its mappings are closed then, never while a copy may still
// use them (#4676), and PyTorch's IPC refcounters of its tensors are
// decremented (torch_ipc_refcount.h).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpu/kv_layout.h"
#include "gpu/transfer_plan.h"
#include "lmcache/status.h"
#include "protocol/device_ipc_wrapper.h"

namespace lmcache::gpu {

// A cudaIpcEventHandle_t as the wire carries it (one size, defined by the protocol).
using EventHandle = std::array<std::uint8_t, protocol::kCudaIpcEventBytes>;

enum class Direction : std::uint8_t {
  kStore,     // gather: paged cache -> L1 object
  kRetrieve,  // scatter: L1 object -> paged cache
};

// One chunk of a transfer: its L1 object and what each group copies.
struct ChunkTransfer {
  std::uint64_t object_offset = 0;  // the object's offset in the pool
  std::vector<GroupCopy> groups;    // a chunk with none is not copied
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
  // A server event that completes at once, marked failed where the backend
  // can: what a failed store/retrieve answers with, so a reference client's
  // Event.from_ipc_handle() gets a real event (it imports whatever comes).
  virtual Result<EventHandle> FailedEvent() = 0;
  // Waits up to `timeout` for every queued transfer to finish; true when none is left.
  virtual bool Drain(std::chrono::milliseconds timeout) = 0;
  virtual std::size_t in_flight() const = 0;
};

struct BackendStats {
  std::uint64_t mapped_allocations = 0;  // open IPC memory mappings now
  std::uint64_t mapped_bytes = 0;
};

// The pool the L1 objects live in, as the device side sees it.
struct PoolView {
  std::span<std::byte> bytes;
};

class KvBackend {
 public:
  virtual ~KvBackend() = default;
  virtual const char* name() const = 0;
  // OK when a device can be used; asked at each registration, never at startup.
  virtual Status CheckAvailable() = 0;
  // Maps `layout`'s tensors and makes a queue for its transfers. `pool` is
  // where objects live (the CUDA backend registers it as pinned memory on
  // the registering worker's device, in the background, at first use).
  virtual Result<std::unique_ptr<KvContext>> Open(const KvLayout& layout, PoolView pool) = 0;
  virtual BackendStats Stats() const = 0;
  // A fault health reports (the pool could not be pinned), or nullopt.
  virtual std::optional<std::string> Problem() const { return std::nullopt; }
};

struct BackendOptions {
  std::chrono::milliseconds event_timeout{10'000};  // longest wait for an engine event
};

// "cuda" or "emulated"; kInvalidConfig for another name.
Result<std::unique_ptr<KvBackend>> MakeKvBackend(const std::string& name, const BackendOptions& options);

// The pointer of an object `bytes` long at `offset` of `pool`, or kInvalidArgument.
Result<std::byte*> ResolveObject(PoolView pool, std::uint64_t offset, std::uint64_t bytes);

// Both backends' rules, stated once:
// kv_cache[index]'s storage and view lie inside the `allocation_bytes` its
// handle really maps (not only what the client claims), or kInvalidArgument.
Status CheckInsideAllocation(const protocol::DeviceIpcWrapper& tensor, std::size_t index,
                             std::uint64_t allocation_bytes);
// An engine event handle of all zeros names no event: nothing to wait for.
bool NoEngineEvent(const EventHandle& handle);
// Polls `complete` (true: done; an error: the event failed) with a backoff
// of 5 us doubling to 0.5 ms, until done, failed, or `deadline` passed
// (kTimeout naming --gpu-event-timeout-ms).
Status PollEngineEvent(const std::function<Result<bool>()>& complete,
                       std::chrono::steady_clock::time_point deadline);

}  // namespace lmcache::gpu
