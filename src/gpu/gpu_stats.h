// The CUDA-IPC path's figures, each declared once (stats/declare.h).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <span>

#include "stats/declare.h"

namespace lmcache::gpu {

// GpuStats's figures, each declared once (stats/declare.h).
#define LMC_GPU_STATS(X, D) \
  X(contexts, "contexts", std::uint64_t, kGauge, "contexts", "gpu_contexts", \
      "GPU registrations with a device context (CUDA-IPC path).") \
  X(closing, "closing_contexts", std::uint64_t, kGauge, "contexts", "gpu_closing_contexts", \
      "Device contexts of departed workers waiting for their copies to drain; stuck above 0 " \
      "means an engine event that never completes.") \
  X(transfers_in_flight, "transfers_in_flight", std::uint64_t, kGauge, "transfers", \
      "gpu_transfers_in_flight", "GPU stores and retrieves queued or copying.") \
  X(mapped_allocations, "mapped_allocations", std::uint64_t, kGauge, "allocations", \
      "gpu_mapped_allocations", "Workers' GPU allocations mapped through IPC handles; " \
      "should fall back after workers leave (#4980).") \
  X(mapped_bytes, "mapped_bytes", std::uint64_t, kGauge, "bytes", "gpu_mapped_bytes", \
      "Bytes of the workers' GPU allocations mapped through IPC handles (their real " \
      "extent); should fall back with them.")

struct GpuStats {
  LMC_STATS_MEMBERS(LMC_GPU_STATS)
};
std::span<const stats::Row<GpuStats>> GpuStatRows();

}  // namespace lmcache::gpu
