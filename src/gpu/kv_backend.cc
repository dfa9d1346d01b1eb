#include "gpu/kv_backend.h"

#include <algorithm>
#include <thread>

#include "gpu/device_probe.h"
#include "gpu/emulated_backend.h"

namespace lmcache::gpu {

#if LMC_HAVE_CUDA
std::unique_ptr<KvBackend> MakeCudaBackend(const BackendOptions& options);  // cuda_backend.cc
#endif

namespace {

// The cuda backend of a build without the toolkit: every registration gets
// the probe's answer, so the server runs and says why the path is missing.
class NoCudaBackend final : public KvBackend {
 public:
  const char* name() const override { return "cuda"; }
  Status CheckAvailable() override { return CheckCudaDeviceVisible(); }
  Result<std::unique_ptr<KvContext>> Open(const KvLayout&, PoolView) override {
    return CheckCudaDeviceVisible();
  }
  BackendStats Stats() const override { return {}; }
};

}  // namespace

Result<std::unique_ptr<KvBackend>> MakeKvBackend(const std::string& name, const BackendOptions& options) {
  if (name == "emulated") return MakeEmulatedBackend(options);
  if (name == "cuda") {
#if LMC_HAVE_CUDA
    return MakeCudaBackend(options);
#else
    (void)options;
    return std::unique_ptr<KvBackend>(new NoCudaBackend());
#endif
  }
  return Status(ErrorCode::kInvalidConfig,
                "--gpu-backend " + name + " is not a backend: use cuda (the default) or emulated "
                "(shared memory stands in for device memory; for tests without a GPU)");
}

Result<std::byte*> ResolveObject(PoolView pool, std::uint64_t offset, std::uint64_t bytes) {
  if (offset > pool.bytes.size() || bytes > pool.bytes.size() - offset) {
    return Status(ErrorCode::kInvalidArgument,
                  "an L1 object at offset " + std::to_string(offset) + " of " + std::to_string(bytes) +
                      " bytes lies outside the pool of " + std::to_string(pool.bytes.size()));
  }
  return pool.bytes.data() + offset;
}

Status CheckInsideAllocation(const protocol::DeviceIpcWrapper& t, std::size_t index,
                             std::uint64_t allocation_bytes) {
  const std::uint64_t end = std::max(t.storage_byte_offset + t.storage_bytes, t.end_byte());
  if (end <= allocation_bytes) return Status::Ok();
  return Status(ErrorCode::kInvalidArgument,
                "kv_cache[" + std::to_string(index) + "] reaches byte " + std::to_string(end) +
                    " of an allocation of " + std::to_string(allocation_bytes) + " bytes");
}

bool NoEngineEvent(const EventHandle& handle) {
  return std::all_of(handle.begin(), handle.end(), [](std::uint8_t b) { return b == 0; });
}

Status PollEngineEvent(const std::function<Result<bool>()>& complete,
                       std::chrono::steady_clock::time_point deadline) {
  auto pause = std::chrono::microseconds(5);
  while (true) {
    LMC_ASSIGN_OR_RETURN(const bool done, complete());
    if (done) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status(ErrorCode::kTimeout, "the engine's event did not complete within "
                                         "--gpu-event-timeout-ms (an engine stopped mid-step?)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(500));
  }
}

}  // namespace lmcache::gpu
