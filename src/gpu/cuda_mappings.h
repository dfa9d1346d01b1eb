// CudaMappings and PoolPinner: the CUDA backend's shared device state
// (built with the toolkit only).
//
// CudaMappings opens each allocation a worker's IPC handles name once per
// device (cudaIpcOpenMemHandle), however many layers and registrations view
// it (since vLLM 0.29 every layer is a view into one allocation), learns its
// real extent (cuMemGetAddressRange), and closes it with its last user.
// PoolPinner registers the L1 pool as pinned memory (cudaHostRegister,
// portable) once, on a thread of its own, after selecting the device of the
// worker that first registered (so no context is made on a GPU nobody uses,
// field notes #4019), and keeps the outcome for health.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "lmcache/status.h"
#include "protocol/device_ipc_wrapper.h"

namespace lmcache::gpu {

struct MappedAllocation {
  std::byte* base = nullptr;
  std::uint64_t size = 0;  // the allocation's real extent
};

class CudaMappings {
 public:
  Result<MappedAllocation> Open(int device, const protocol::MemHandle& handle) LMC_EXCLUDES(mu_);
  void Close(int device, const protocol::MemHandle& handle) LMC_EXCLUDES(mu_);
  std::uint64_t count() const LMC_EXCLUDES(mu_);
  std::uint64_t bytes() const LMC_EXCLUDES(mu_);

 private:
  struct Entry {
    MappedAllocation mapped;
    int users = 0;
  };
  mutable Mutex mu_;
  std::map<std::pair<int, protocol::MemHandle>, Entry> open_ LMC_GUARDED_BY(mu_);
};

class PoolPinner {
 public:
  ~PoolPinner();
  // Starts pinning `pool` from a thread that selects `device` first (once).
  void Start(int device, std::span<std::byte> pool) LMC_EXCLUDES(mu_);
  // Waits until the pin is done: OK, or why it failed.
  Status Wait() LMC_EXCLUDES(mu_);
  // The failure health reports, if any.
  std::optional<std::string> Problem() const LMC_EXCLUDES(mu_);

 private:
  void Pin(int device, std::span<std::byte> pool);

  mutable Mutex mu_;
  CondVar done_;
  bool started_ LMC_GUARDED_BY(mu_) = false;
  int device_ LMC_GUARDED_BY(mu_) = 0;  // the device it was pinned from
  std::optional<Status> outcome_ LMC_GUARDED_BY(mu_);
  std::span<std::byte> pinned_ LMC_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace lmcache::gpu
