#include "gpu/cuda_mappings.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

#include "gpu/cuda_support.h"

namespace lmcache::gpu {

namespace {

// Opens one allocation on `device` and learns its real extent.
Result<MappedAllocation> OpenAllocation(int device, const protocol::MemHandle& handle) {
  LMC_ASSIGN_OR_RETURN(const DriverCalls* driver, Driver());
  LMC_CUDA_RETURN(cudaSetDevice(device));
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* base = nullptr;
  const cudaError_t error = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
  if (error != cudaSuccess) return CudaError("cudaIpcOpenMemHandle (the worker's KV cache)", error);
  CUdeviceptr start = 0;
  size_t size = 0;
  const CUresult range = driver->mem_get_address_range(&start, &size, reinterpret_cast<CUdeviceptr>(base));
  if (range != CUDA_SUCCESS) {
    cudaIpcCloseMemHandle(base);
    return DriverError("cuMemGetAddressRange", range);
  }
  // The handle names the allocation from its base; a mapping that starts
  // elsewhere is bounded from where it starts.
  return MappedAllocation{static_cast<std::byte*>(base),
                          static_cast<std::uint64_t>(start + size - reinterpret_cast<CUdeviceptr>(base))};
}

}  // namespace

Result<MappedAllocation> CudaMappings::Open(int device, const protocol::MemHandle& handle) {
  MutexLock lock(&mu_);
  auto it = open_.find({device, handle});
  if (it == open_.end()) {
    LMC_ASSIGN_OR_RETURN(const MappedAllocation mapped, OpenAllocation(device, handle));
    it = open_.emplace(std::make_pair(device, handle), Entry{mapped, 0}).first;
  }
  it->second.users += 1;
  return it->second.mapped;
}

void CudaMappings::Close(int device, const protocol::MemHandle& handle) {
  MutexLock lock(&mu_);
  auto it = open_.find({device, handle});
  if (it == open_.end() || --it->second.users > 0) return;
  cudaSetDevice(device);
  cudaIpcCloseMemHandle(it->second.mapped.base);
  open_.erase(it);
}

std::uint64_t CudaMappings::count() const {
  MutexLock lock(&mu_);
  return open_.size();
}

std::uint64_t CudaMappings::bytes() const {
  MutexLock lock(&mu_);
  std::uint64_t total = 0;
  for (const auto& [key, entry] : open_) total += entry.mapped.size;
  return total;
}

PoolPinner::~PoolPinner() {
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  if (pinned_.empty()) return;
  cudaSetDevice(device_);  // no context on a device nobody used (#4019)
  cudaHostUnregister(pinned_.data());
}

void PoolPinner::Start(int device, std::span<std::byte> pool) {
  MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  device_ = device;
  thread_ = std::thread([this, device, pool] { Pin(device, pool); });
}

void PoolPinner::Pin(int device, std::span<std::byte> pool) {
  const auto start = std::chrono::steady_clock::now();
  Status status;
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) error = cudaHostRegister(pool.data(), pool.size(), cudaHostRegisterPortable);
  if (error != cudaSuccess) {
    status = Status(ErrorCode::kInternal,
                    std::string("the L1 pool could not be pinned for the GPU (cudaHostRegister: ") +
                        cudaGetErrorString(error) + "); CUDA-IPC transfers fail until the server "
                        "restarts (check the memlock limit: ulimit -l, the container's "
                        "--ulimit memlock=-1)");
    spdlog::error("{}", status.message());
  } else {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("pinned the {:.2f} GiB L1 pool for GPU transfers in {:.3f} s (device {})",
                 static_cast<double>(pool.size()) / (1u << 30), seconds, device);
  }
  MutexLock lock(&mu_);
  if (status.ok()) pinned_ = pool;
  outcome_ = status;
  done_.NotifyAll();
}

Status PoolPinner::Wait() {
  MutexLock lock(&mu_);
  while (!outcome_) done_.Wait(&lock);
  return *outcome_;
}

std::optional<std::string> PoolPinner::Problem() const {
  MutexLock lock(&mu_);
  if (outcome_ && !outcome_->ok()) return outcome_->message();
  return std::nullopt;
}

}  // namespace lmcache::gpu
