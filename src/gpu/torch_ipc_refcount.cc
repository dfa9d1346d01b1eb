#include "gpu/torch_ipc_refcount.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>

#include "common/logging.h"
#include "shm/shm_segment.h"

namespace lmcache::gpu {
namespace {

constexpr std::uint64_t kHeaderBytes = 64;  // PyTorch's map_alloc_alignment
constexpr std::uint64_t kFileBytes = kHeaderBytes + 8 * protocol::kTorchRefCounterSlots;

bool Release(const protocol::TorchRefCounter& counter) {
  static RateLimitedLog skipped(std::chrono::seconds(10));
  const std::string name = counter.shm_name.substr(1);  // validated: "/" then one safe name
  if (name.starts_with("lmcache_")) {
    skipped.Warn("IPC refcounter {} names one of this server's segments; left alone", name);
    return false;
  }
  auto file = shm::ShmSegment::Attach(name, 0);
  if (!file.ok()) return false;  // the engine is gone and took its file with it
  const std::uint64_t slot = kHeaderBytes + 8 * counter.index;
  if ((*file)->size() < slot + 8 || (*file)->size() > kFileBytes) {
    skipped.Warn("IPC refcounter {} is {} bytes, not a PyTorch refcounter file; left alone", name,
                 (*file)->size());
    return false;
  }
  std::byte* base = (*file)->base();
  std::atomic_ref<int> maps(*reinterpret_cast<int*>(base));
  maps.fetch_add(1, std::memory_order_acq_rel);
  std::atomic_ref<std::int64_t>(*reinterpret_cast<std::int64_t*>(base + slot))
      .fetch_sub(1, std::memory_order_acq_rel);
  if (maps.fetch_sub(1, std::memory_order_acq_rel) == 1) shm_unlink(counter.shm_name.c_str());
  return true;
}

}  // namespace

std::size_t ReleaseTorchRefCounters(std::span<const protocol::DeviceIpcWrapper> tensors) {
  std::size_t released = 0;
  for (const protocol::DeviceIpcWrapper& t : tensors) {
    if (t.ref_counter && Release(*t.ref_counter)) ++released;
  }
  return released;
}

}  // namespace lmcache::gpu
