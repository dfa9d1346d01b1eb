// The CUDA backend of the CUDA-IPC path (built with the toolkit). No CUDA call
// is made before the first registration (field notes #4019): the L1 pool is
// registered as pinned host memory then, once, and a device is touched only
// when a worker registers tensors on it.
//
// Per context: one non-blocking stream, a device staging buffer of one
// object, a device array of the layers' base addresses. A transfer enqueues,
// in stream order: a wait on the engine's imported event; per chunk, the
// block ids' upload, the gather kernel and the D2H copy into the L1 object
// (store) or the H2D copy and the scatter kernel (retrieve); the record of
// the server's interprocess event; and a host function that calls `done`.
// Mappings (cudaIpcOpenMemHandle) are shared per (device, handle) and closed
// with the last context, which is destroyed only after its stream drained.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "gpu/device_probe.h"
#include "gpu/kv_backend.h"
#include "kv_copy.h"

namespace lmcache::gpu {
namespace {

constexpr std::size_t kRetainedEvents = 4096;  // the reference's completion-based retention

Status CudaError(const char* call, cudaError_t error) {
  return Status(ErrorCode::kInternal, std::string(call) + ": " + cudaGetErrorString(error));
}

#define LMC_CUDA_RETURN(call)                                   \
  do {                                                          \
    const cudaError_t lmc_cuda_error = (call);                  \
    if (lmc_cuda_error != cudaSuccess) return CudaError(#call, lmc_cuda_error); \
  } while (0)

std::string UuidText(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[40];
  std::snprintf(text, sizeof(text),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return text;
}

// "GPU-6b1c..." or "6B1C..." -> "6b1c...".
std::string NormalUuid(std::string uuid) {
  if (uuid.rfind("GPU-", 0) == 0) uuid = uuid.substr(4);
  std::transform(uuid.begin(), uuid.end(), uuid.begin(), [](unsigned char c) { return std::tolower(c); });
  return uuid;
}

Result<int> DeviceOf(const std::string& uuid) {
  int count = 0;
  LMC_CUDA_RETURN(cudaGetDeviceCount(&count));
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    LMC_CUDA_RETURN(cudaGetDeviceProperties(&p, i));
    if (UuidText(p.uuid) == NormalUuid(uuid)) return i;
  }
  return Status(ErrorCode::kNotSupported,
                "the worker's GPU " + uuid + " is not visible to the server (of " +
                    std::to_string(count) + " it sees): give the server the same GPUs "
                    "(CUDA_VISIBLE_DEVICES, --gpus)");
}

using MemoryHandle = std::array<std::uint8_t, protocol::kCudaIpcHandleBytes>;

// Open IPC mappings, one per (device, allocation), with their users.
class Mappings {
 public:
  Result<std::byte*> Open(int device, const MemoryHandle& handle) LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    Entry& e = open_[{device, handle}];
    if (e.refs == 0) {
      cudaIpcMemHandle_t h;
      std::memcpy(&h, handle.data(), sizeof(h));
      void* base = nullptr;
      LMC_CUDA_RETURN(cudaSetDevice(device));
      const cudaError_t error = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
      if (error != cudaSuccess) {
        open_.erase({device, handle});
        return CudaError("cudaIpcOpenMemHandle (the worker's KV cache)", error);
      }
      e.base = static_cast<std::byte*>(base);
    }
    e.refs += 1;
    return e.base;
  }
  void Close(int device, const MemoryHandle& handle) LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    auto it = open_.find({device, handle});
    if (it == open_.end() || --it->second.refs > 0) return;
    cudaSetDevice(device);
    cudaIpcCloseMemHandle(it->second.base);
    open_.erase(it);
  }
  std::uint64_t size() const LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return open_.size();
  }

 private:
  struct Entry {
    std::byte* base = nullptr;
    int refs = 0;
  };
  mutable Mutex mu_;
  std::map<std::pair<int, MemoryHandle>, Entry> open_ LMC_GUARDED_BY(mu_);
};

struct Job {
  std::function<void(const Status&)> done;
  Status status;
  std::atomic<std::size_t>* in_flight;
  std::vector<std::int32_t> ids;  // every chunk's block ids, kept until the job ends
};

void CUDART_CB JobFinished(void* data) {
  std::unique_ptr<Job> job(static_cast<Job*>(data));
  job->done(job->status);
  job->in_flight->fetch_sub(1, std::memory_order_acq_rel);
}

class CudaContext final : public KvContext {
 public:
  CudaContext(Mappings* mappings, int device, const KvLayout& layout, std::int64_t chunk_tokens)
      : mappings_(mappings), device_(device), geometry_(layout.geometry),
        object_(layout.Object(chunk_tokens)), object_bytes_(layout.ObjectBytes(chunk_tokens)) {
    for (const auto& t : layout.layers) handles_.push_back(t.mem_handle);
  }

  Status Init(const KvLayout& layout) {
    LMC_CUDA_RETURN(cudaSetDevice(device_));
    std::vector<std::uint64_t> bases;
    for (std::size_t i = 0; i < handles_.size(); ++i) {
      LMC_ASSIGN_OR_RETURN(std::byte* base, mappings_->Open(device_, handles_[i]));
      opened_ += 1;
      bases.push_back(reinterpret_cast<std::uint64_t>(base + layout.layers[i].first_byte()));
    }
    LMC_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    LMC_CUDA_RETURN(cudaMalloc(&staging_, object_bytes_));
    LMC_CUDA_RETURN(cudaMalloc(reinterpret_cast<void**>(&layer_bases_), bases.size() * sizeof(std::uint64_t)));
    LMC_CUDA_RETURN(cudaMemcpy(layer_bases_, bases.data(), bases.size() * sizeof(std::uint64_t),
                               cudaMemcpyHostToDevice));
    return {};
  }

  ~CudaContext() override {
    cudaSetDevice(device_);
    for (cudaEvent_t e : exported_) cudaEventDestroy(e);
    if (staging_) cudaFree(staging_);
    if (layer_bases_) cudaFree(layer_bases_);
    if (stream_) cudaStreamDestroy(stream_);
    for (std::size_t i = 0; i < opened_; ++i) mappings_->Close(device_, handles_[i]);
  }

  Result<EventHandle> Enqueue(Direction direction, const EventHandle& engine_event,
                              std::vector<ChunkTransfer> chunks,
                              std::function<void(const Status&)> done) override {
    MutexLock lock(&mu_);  // one transfer's commands stay together on the stream
    auto job = std::make_unique<Job>();
    job->done = std::move(done);
    job->in_flight = &in_flight_;
    bool queued_any = false;
    job->status = QueueCopies(direction, engine_event, chunks, &queued_any);
    EventHandle handle{};
    if (job->status.ok()) job->status = Export(&handle);
    const Status status = job->status;
    if (!status.ok() && !queued_any) {
      job->done(status);  // nothing reached the stream: nothing can still touch the objects
      return status;
    }
    // Even a failed transfer ends in stream order, after whatever of it was queued.
    in_flight_.fetch_add(1, std::memory_order_acq_rel);
    const cudaError_t error = cudaLaunchHostFunc(stream_, JobFinished, job.get());
    if (error != cudaSuccess) {
      // The stream is broken: when its copies end is unknown, so the objects
      // stay leased (a store's until its write TTL) rather than being reused
      // under a copy.
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      static_cast<void>(job.release());
      return CudaError("cudaLaunchHostFunc", error);
    }
    static_cast<void>(job.release());  // JobFinished owns it
    if (!status.ok()) return status;
    return handle;
  }

  bool Drain(std::chrono::milliseconds timeout) override {
    // Polled, never cudaStreamSynchronize: a foreign event that never completes
    // must not hang the caller (#4676).
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      cudaSetDevice(device_);
      if (cudaStreamQuery(stream_) != cudaErrorNotReady && in_flight_.load() == 0) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::size_t in_flight() const override { return in_flight_.load(std::memory_order_acquire); }

 private:
  Status QueueCopies(Direction direction, const EventHandle& engine_event,
                     const std::vector<ChunkTransfer>& chunks, bool* queued_any) LMC_REQUIRES(mu_) {
    LMC_CUDA_RETURN(cudaSetDevice(device_));
    cudaIpcEventHandle_t h;
    std::memcpy(&h, engine_event.data(), sizeof(h));
    cudaEvent_t engine = nullptr;
    LMC_CUDA_RETURN(cudaIpcOpenEventHandle(&engine, h));
    const cudaError_t waited = cudaStreamWaitEvent(stream_, engine, 0);
    cudaEventDestroy(engine);  // the wait stays queued
    if (waited != cudaSuccess) return CudaError("cudaStreamWaitEvent", waited);
    *queued_any = true;
    std::size_t total_ids = 0;
    for (const ChunkTransfer& c : chunks) total_ids += c.block_ids.size();
    std::int32_t* ids = nullptr;
    LMC_CUDA_RETURN(cudaMallocAsync(reinterpret_cast<void**>(&ids), std::max<std::size_t>(1, total_ids) * 4, stream_));
    std::size_t at = 0;
    Status status;
    for (const ChunkTransfer& c : chunks) {
      // From pageable memory: staged at once, so the vector may go.
      cudaMemcpyAsync(ids + at, c.block_ids.data(), c.block_ids.size() * 4, cudaMemcpyHostToDevice, stream_);
      const kv::ChunkCopy copy{geometry_, object_, ids + at, c.tokens, c.skip_tokens};
      at += c.block_ids.size();
      if (direction == Direction::kStore) {
        int e = kv::LaunchGather(copy, layer_bases_, staging_, stream_);
        if (e == 0) e = cudaMemcpyAsync(c.object, staging_, object_bytes_, cudaMemcpyDeviceToHost, stream_);
        if (e != 0) status = CudaError("gather", static_cast<cudaError_t>(e));
      } else {
        int e = cudaMemcpyAsync(staging_, c.object, object_bytes_, cudaMemcpyHostToDevice, stream_);
        if (e == 0) e = kv::LaunchScatter(copy, layer_bases_, staging_, stream_);
        if (e != 0) status = CudaError("scatter", static_cast<cudaError_t>(e));
      }
      if (!status.ok()) break;
    }
    cudaFreeAsync(ids, stream_);
    return status;
  }

  Status Export(EventHandle* handle) LMC_REQUIRES(mu_) {
    while (exported_.size() >= kRetainedEvents && cudaEventQuery(exported_.front()) == cudaSuccess) {
      cudaEventDestroy(exported_.front());
      exported_.pop_front();
    }
    cudaEvent_t event = nullptr;
    LMC_CUDA_RETURN(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess));
    exported_.push_back(event);  // kept until complete and 4096 exports old
    LMC_CUDA_RETURN(cudaEventRecord(event, stream_));
    cudaIpcEventHandle_t h;
    LMC_CUDA_RETURN(cudaIpcGetEventHandle(&h, event));
    std::memcpy(handle->data(), &h, sizeof(h));
    return {};
  }

  Mappings* const mappings_;
  const int device_;
  const kv::PagedGeometry geometry_;
  const kv::ObjectGeometry object_;
  const std::uint64_t object_bytes_;
  std::vector<MemoryHandle> handles_;
  std::size_t opened_ = 0;
  cudaStream_t stream_ = nullptr;
  void* staging_ = nullptr;
  std::uint64_t* layer_bases_ = nullptr;
  std::atomic<std::size_t> in_flight_{0};
  Mutex mu_;
  std::deque<cudaEvent_t> exported_ LMC_GUARDED_BY(mu_);
};

class CudaBackend final : public KvBackend {
 public:
  const char* name() const override { return "cuda"; }
  Status CheckAvailable() override { return CheckCudaDeviceVisible(); }
  BackendStats Stats() const override { return {mappings_.size(), 0}; }

  Result<std::unique_ptr<KvContext>> Open(const KvLayout& layout, std::int64_t chunk_tokens,
                                          std::span<std::byte> l1) override {
    LMC_RETURN_IF_ERROR(CheckCudaDeviceVisible());
    LMC_ASSIGN_OR_RETURN(const int device, DeviceOf(layout.device_uuid));
    LMC_RETURN_IF_ERROR(PinL1(l1));
    auto context = std::make_unique<CudaContext>(&mappings_, device, layout, chunk_tokens);
    LMC_RETURN_IF_ERROR(context->Init(layout));
    return std::unique_ptr<KvContext>(std::move(context));
  }

 private:
  // Pinned once, for every device (portable), at the first registration.
  Status PinL1(std::span<std::byte> l1) LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (pinned_) return {};
    LMC_CUDA_RETURN(cudaHostRegister(l1.data(), l1.size(), cudaHostRegisterPortable));
    pinned_ = true;
    return {};
  }

  Mappings mappings_;
  Mutex mu_;
  bool pinned_ LMC_GUARDED_BY(mu_) = false;
};

}  // namespace

std::unique_ptr<KvBackend> MakeCudaBackend(const BackendOptions&) { return std::make_unique<CudaBackend>(); }

}  // namespace lmcache::gpu
