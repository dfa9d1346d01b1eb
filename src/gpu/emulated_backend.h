// The host emulation of the CUDA-IPC path (--gpu-backend emulated): what CI
// runs end to end without a GPU, through the same wire format, layouts,
// leases and ordering as the CUDA backend.
//
// "Device memory" is a POSIX shared-memory segment the worker creates and
// the server maps; an "event" is an 8-byte word in a shared-memory segment.
// Handle bytes (the 64 bytes where CUDA puts cudaIpc*Handle_t):
//   memory: "LMCEMUM\0", then the segment's name, NUL-terminated (<= 55 bytes)
//   event:  "LMCEMUE\0", u64 LE offset of the word, u64 LE value, then the
//           segment's name, NUL-terminated (<= 39 bytes); all zeros: no event
// An event is complete once its word >= value, and failed if bit 63 of the
// word is set as well. The server's own events are words of a segment it
// creates at the first emulated registration; each export takes the next of
// 4096 words (so a handle stays valid for 4096 later exports, as the
// reference retains its events) and stores value = generation of that word.
// The copies run on one thread per context, with csrc/kv_index.h's math.
// It is a test backend: a client may name any shared-memory segment the
// server's user can open (the server's own pool and event segments are
// refused), so it is never for production.
//
// Thread-safety: as KvBackend / KvContext (kv_backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/kv_backend.h"
#include "protocol/device_ipc_wrapper.h"

namespace lmcache::gpu {

inline constexpr std::uint64_t kEventFailedBit = std::uint64_t{1} << 63;

std::unique_ptr<KvBackend> MakeEmulatedBackend(const BackendOptions& options);

// Handle bytes an emulated worker sends (tests, benchmarks); the name must fit.
std::array<std::uint8_t, protocol::kCudaIpcHandleBytes> EmulatedMemoryHandle(const std::string& shm_name);
EventHandle EmulatedEventHandle(const std::string& shm_name, std::uint64_t offset, std::uint64_t value);

}  // namespace lmcache::gpu
