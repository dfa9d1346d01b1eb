#include "gpu/kv_backend.h"

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

}  // namespace lmcache::gpu
