// The CUDA backend of the CUDA-IPC path (built with the toolkit). No CUDA call
// is made before the first registration (field notes #4019); the L1 pool is
// pinned then, in the background, on the registering worker's device
// (cuda_mappings.h), and a device is touched only when a worker registers
// tensors on it.
//
// Per context: a copy stream, a completion stream, a device staging buffer
// of one object, each group's array of layer base addresses, a device word
// `done`, and a host thread. A transfer is two halves:
//   request thread (Enqueue): takes the next ticket, makes the completion
//     stream wait until done >= ticket (cuStreamWaitValue64), records the
//     server's interprocess event there and returns its handle at once:
//     the event completes only when this transfer has ended;
//   host thread, in ticket order: waits for the pool's pin, then polls the
//     engine's event (at most --gpu-event-timeout-ms); on success queues the
//     copies on the copy stream (per chunk: block ids up, gather kernel and
//     D2H into the L1 object, or H2D and the scatter kernel); in every case
//     then queues done = ticket (cuStreamWriteValue64) and the host function
//     that calls `done` with the outcome.
// The copy stream never waits on a foreign event, so an engine that dies
// mid-step leaves nothing blocked on the device: its transfers fail after
// the timeout, its streams go idle, and its mappings close (LMCache #4980).
// Mappings are shared per (device, handle), bounded by the allocation's real
// extent, and closed with the last context using them.
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "gpu/cuda_mappings.h"
#include "gpu/cuda_support.h"
#include "gpu/device_probe.h"
#include "gpu/kv_backend.h"
#include "gpu/torch_ipc_refcount.h"
#include "kv_copy.h"

namespace lmcache::gpu {
namespace {

constexpr std::size_t kRetainedEvents = 4096;  // the reference's completion-based retention
constexpr std::size_t kMaxQueuedTransfers = 4096;

struct Shared {
  CudaMappings mappings;
  PoolPinner pinner;
  BackendOptions options;
};

struct CudaJob {
  Direction direction = Direction::kStore;
  EventHandle engine_event{};
  std::vector<ChunkTransfer> chunks;  // kept until the job ends (its block ids are uploaded from here)
  std::function<void(const Status&)> done;
  std::uint64_t ticket = 0;
  Status status;
  std::atomic<std::size_t>* in_flight = nullptr;
};

void CUDART_CB JobFinished(void* data) {
  std::unique_ptr<CudaJob> job(static_cast<CudaJob*>(data));
  job->done(job->status);
  job->in_flight->fetch_sub(1, std::memory_order_acq_rel);
}

bool IsZero(const EventHandle& h) {
  return std::all_of(h.begin(), h.end(), [](std::uint8_t b) { return b == 0; });
}

class CudaContext final : public KvContext {
 public:
  CudaContext(std::shared_ptr<Shared> shared, int device, const KvLayout& layout, PoolView pool)
      : shared_(std::move(shared)), device_(device), layout_(layout), pool_(pool) {}

  Status Init() {
    LMC_ASSIGN_OR_RETURN(driver_, Driver());
    LMC_CUDA_RETURN(cudaSetDevice(device_));
    std::vector<std::byte*> tensor_bases;
    for (std::size_t i = 0; i < layout_.tensors.size(); ++i) {
      LMC_ASSIGN_OR_RETURN(std::byte* base, MapTensor(i));
      tensor_bases.push_back(base);
    }
    for (const protocol::DeviceIpcWrapper& t : layout_.tensors) {
      if (t.event_sync_required) LMC_RETURN_IF_ERROR(WaitForEngine(t.event_handle));
    }
    LMC_CUDA_RETURN(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    LMC_CUDA_RETURN(cudaStreamCreateWithFlags(&completion_, cudaStreamNonBlocking));
    LMC_CUDA_RETURN(cudaMalloc(&staging_, std::max<std::uint64_t>(layout_.object_bytes, 16)));
    LMC_CUDA_RETURN(cudaMalloc(reinterpret_cast<void**>(&done_word_), sizeof(std::uint64_t)));
    LMC_CUDA_RETURN(cudaMemset(done_word_, 0, sizeof(std::uint64_t)));
    for (const KvGroupLayout& g : layout_.groups) {
      std::vector<std::uint64_t> bases;
      for (const LayerRef& l : g.layers) {
        bases.push_back(reinterpret_cast<std::uint64_t>(tensor_bases[l.tensor] + l.first_byte));
      }
      std::uint64_t* device_bases = nullptr;
      LMC_CUDA_RETURN(cudaMalloc(reinterpret_cast<void**>(&device_bases), bases.size() * 8));
      group_bases_.push_back(device_bases);
      LMC_CUDA_RETURN(cudaMemcpy(device_bases, bases.data(), bases.size() * 8, cudaMemcpyHostToDevice));
    }
    // Stream memory operations are what orders the server's events: check them now.
    LMC_RETURN_IF_ERROR(WriteDone(0));
    LMC_RETURN_IF_ERROR(WaitDone(0));
    LMC_CUDA_RETURN(cudaStreamSynchronize(completion_));
    thread_ = std::thread([this] { Run(); });
    return {};
  }

  ~CudaContext() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    work_.NotifyAll();
    if (thread_.joinable()) thread_.join();
    cudaSetDevice(device_);
    if (copy_) cudaStreamSynchronize(copy_);
    if (completion_) cudaStreamSynchronize(completion_);
    {
      MutexLock lock(&mu_);
      for (cudaEvent_t e : exported_) cudaEventDestroy(e);
    }
    for (std::uint64_t* bases : group_bases_) cudaFree(bases);
    if (staging_) cudaFree(staging_);
    if (done_word_) cudaFree(done_word_);
    if (copy_) cudaStreamDestroy(copy_);
    if (completion_) cudaStreamDestroy(completion_);
    for (std::size_t i = 0; i < mapped_; ++i) shared_->mappings.Close(device_, layout_.tensors[i].mem_handle);
    ReleaseTorchRefCounters(layout_.tensors);
  }

  Result<EventHandle> Enqueue(Direction direction, const EventHandle& engine_event,
                              std::vector<ChunkTransfer> chunks,
                              std::function<void(const Status&)> done) override {
    auto job = std::make_unique<CudaJob>();
    job->direction = direction;
    job->engine_event = engine_event;
    job->chunks = std::move(chunks);
    job->done = std::move(done);
    job->in_flight = &in_flight_;
    MutexLock lock(&mu_);  // ticket order is queue order is completion-stream order
    if (stopping_ || queue_.size() >= kMaxQueuedTransfers) {
      const Status refused(ErrorCode::kUnavailable, stopping_ ? "the GPU context is closing"
                                                              : "too many GPU transfers queued");
      job->done(refused);  // nothing reached a stream
      return refused;
    }
    job->ticket = ++next_ticket_;
    Status status = WaitDone(job->ticket);
    EventHandle handle{};
    if (status.ok()) status = ExportLocked(completion_, &handle);
    // Even a transfer refused here goes through the host thread: its ticket
    // must be written, or the completion stream would wait for it forever.
    job->status = status;
    in_flight_.fetch_add(1, std::memory_order_acq_rel);
    queue_.push_back(std::move(job));
    work_.NotifyAll();
    if (!status.ok()) return status;
    return handle;
  }

  Result<EventHandle> FailedEvent() override {
    MutexLock lock(&mu_);
    EventHandle handle{};
    LMC_RETURN_IF_ERROR(ExportLocked(copy_, &handle));  // the copy stream never waits on others
    return handle;
  }

  bool Drain(std::chrono::milliseconds timeout) override {
    // Polled, never synchronized: a caller must not hang on the device.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      cudaSetDevice(device_);
      if (in_flight_.load() == 0 && cudaStreamQuery(copy_) != cudaErrorNotReady &&
          cudaStreamQuery(completion_) != cudaErrorNotReady) {
        return true;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::size_t in_flight() const override { return in_flight_.load(std::memory_order_acquire); }

 private:
  Result<std::byte*> MapTensor(std::size_t i) {
    const protocol::DeviceIpcWrapper& t = layout_.tensors[i];
    LMC_ASSIGN_OR_RETURN(const MappedAllocation mapped, shared_->mappings.Open(device_, t.mem_handle));
    mapped_ = i + 1;
    const std::uint64_t end = std::max(t.storage_byte_offset + t.storage_bytes, t.end_byte());
    if (end > mapped.size) {
      return Status(ErrorCode::kInvalidArgument,
                    "kv_cache[" + std::to_string(i) + "] reaches byte " + std::to_string(end) +
                        " of an allocation of " + std::to_string(mapped.size) + " bytes");
    }
    return mapped.base;
  }

  Status WaitDone(std::uint64_t ticket) {
    const CUresult r = driver_->stream_wait_value64(reinterpret_cast<CUstream>(completion_),
                                                   reinterpret_cast<CUdeviceptr>(done_word_), ticket,
                                                   CU_STREAM_WAIT_VALUE_GEQ);
    return r == CUDA_SUCCESS ? Status::Ok() : DriverError("cuStreamWaitValue64", r);
  }

  Status WriteDone(std::uint64_t ticket) {
    const CUresult r = driver_->stream_write_value64(reinterpret_cast<CUstream>(copy_),
                                                    reinterpret_cast<CUdeviceptr>(done_word_), ticket,
                                                    CU_STREAM_WRITE_VALUE_DEFAULT);
    return r == CUDA_SUCCESS ? Status::Ok() : DriverError("cuStreamWriteValue64", r);
  }

  Status ExportLocked(cudaStream_t stream, EventHandle* handle) LMC_REQUIRES(mu_) {
    while (exported_.size() >= kRetainedEvents && cudaEventQuery(exported_.front()) == cudaSuccess) {
      cudaEventDestroy(exported_.front());
      exported_.pop_front();
    }
    cudaEvent_t event = nullptr;
    LMC_CUDA_RETURN(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess));
    exported_.push_back(event);  // kept until complete and 4096 exports old
    LMC_CUDA_RETURN(cudaEventRecord(event, stream));
    cudaIpcEventHandle_t h;
    LMC_CUDA_RETURN(cudaIpcGetEventHandle(&h, event));
    std::memcpy(handle->data(), &h, sizeof(h));
    return {};
  }

  void Run() {
    cudaSetDevice(device_);
    while (true) {
      std::unique_ptr<CudaJob> job;
      bool closing = false;
      {
        MutexLock lock(&mu_);
        while (!stopping_ && queue_.empty()) work_.Wait(&lock);
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        closing = stopping_;
      }
      if (job->status.ok() && closing) job->status = Status(ErrorCode::kUnavailable, "the GPU context is closing");
      if (job->status.ok()) job->status = shared_->pinner.Wait();
      if (job->status.ok()) job->status = WaitForEngine(job->engine_event);
      if (job->status.ok()) job->status = QueueCopies(*job);
      Finish(std::move(job));
    }
  }

  // Releases the completion stream for the job and calls `done` after what it queued.
  void Finish(std::unique_ptr<CudaJob> job) {
    const Status written = WriteDone(job->ticket);
    if (!written.ok() && job->status.ok()) job->status = written;
    const cudaError_t error = cudaLaunchHostFunc(copy_, JobFinished, job.get());
    if (error == cudaSuccess) {
      static_cast<void>(job.release());  // JobFinished owns it
      return;
    }
    // The stream is broken: when its copies end is unknown, so the objects
    // stay leased (pinned) rather than being reused under a copy.
    spdlog::error("GPU transfer {} cannot complete in stream order ({}); its L1 objects stay locked",
                  job->ticket, cudaGetErrorString(error));
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    static_cast<void>(job.release());
  }

  // Polls the engine's event on this thread: the device never waits on it.
  Status WaitForEngine(const EventHandle& handle) {
    if (IsZero(handle)) return {};
    cudaIpcEventHandle_t h;
    std::memcpy(&h, handle.data(), sizeof(h));
    cudaEvent_t engine = nullptr;
    LMC_CUDA_RETURN(cudaIpcOpenEventHandle(&engine, h));
    const auto deadline = std::chrono::steady_clock::now() + shared_->options.event_timeout;
    auto pause = std::chrono::microseconds(5);
    Status status;
    while (true) {
      const cudaError_t state = cudaEventQuery(engine);
      if (state == cudaSuccess) break;
      if (state != cudaErrorNotReady) {
        status = CudaError("cudaEventQuery (the engine's event)", state);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        status = Status(ErrorCode::kTimeout, "the engine's event did not complete within "
                                             "--gpu-event-timeout-ms (an engine stopped mid-step?)");
        break;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
    cudaEventDestroy(engine);
    return status;
  }

  Status QueueCopies(const CudaJob& job) {
    std::size_t total_ids = 0;
    for (const ChunkTransfer& c : job.chunks) {
      for (const GroupCopy& g : c.groups) total_ids += g.block_ids.size();
    }
    std::int32_t* ids = nullptr;
    LMC_CUDA_RETURN(cudaMallocAsync(reinterpret_cast<void**>(&ids), std::max<std::size_t>(1, total_ids) * 4, copy_));
    Status status;
    std::size_t at = 0;
    for (const ChunkTransfer& chunk : job.chunks) {
      if (chunk.groups.empty()) continue;
      status = QueueChunk(job.direction, chunk, ids, &at);
      if (!status.ok()) break;
    }
    cudaFreeAsync(ids, copy_);
    return status;
  }

  Status QueueChunk(Direction direction, const ChunkTransfer& chunk, std::int32_t* ids, std::size_t* at) {
    LMC_ASSIGN_OR_RETURN(std::byte* object, ResolveObject(pool_, chunk.object_offset, layout_.object_bytes));
    auto* staging = static_cast<std::uint8_t*>(staging_);
    if (direction == Direction::kRetrieve) {
      LMC_CUDA_RETURN(cudaMemcpyAsync(staging, object, layout_.object_bytes, cudaMemcpyHostToDevice, copy_));
    }
    for (const GroupCopy& part : chunk.groups) {
      const KvGroupLayout& g = layout_.groups[part.group];
      // Pageable: staged at once, on this (host) thread.
      LMC_CUDA_RETURN(cudaMemcpyAsync(ids + *at, part.block_ids.data(), part.block_ids.size() * 4,
                                      cudaMemcpyHostToDevice, copy_));
      const kv::ChunkCopy copy{g.paged, g.object(), ids + *at, g.slots, part.skip_tokens};
      *at += part.block_ids.size();
      const int e = direction == Direction::kStore
                        ? kv::LaunchGather(copy, group_bases_[part.group], staging + g.object_offset, copy_)
                        : kv::LaunchScatter(copy, group_bases_[part.group], staging + g.object_offset, copy_);
      if (e != 0) return CudaError(direction == Direction::kStore ? "gather" : "scatter", static_cast<cudaError_t>(e));
    }
    if (direction == Direction::kStore) {
      LMC_CUDA_RETURN(cudaMemcpyAsync(object, staging, layout_.object_bytes, cudaMemcpyDeviceToHost, copy_));
    }
    return {};
  }

  const std::shared_ptr<Shared> shared_;
  const int device_;
  const KvLayout layout_;
  const PoolView pool_;
  const DriverCalls* driver_ = nullptr;
  std::size_t mapped_ = 0;  // tensors whose mapping this context holds
  cudaStream_t copy_ = nullptr;
  cudaStream_t completion_ = nullptr;
  void* staging_ = nullptr;
  std::uint64_t* done_word_ = nullptr;
  std::vector<std::uint64_t*> group_bases_;
  std::atomic<std::size_t> in_flight_{0};
  Mutex mu_;
  CondVar work_;
  bool stopping_ LMC_GUARDED_BY(mu_) = false;
  std::uint64_t next_ticket_ LMC_GUARDED_BY(mu_) = 0;
  std::deque<std::unique_ptr<CudaJob>> queue_ LMC_GUARDED_BY(mu_);
  std::deque<cudaEvent_t> exported_ LMC_GUARDED_BY(mu_);
  std::thread thread_;
};

class CudaBackend final : public KvBackend {
 public:
  explicit CudaBackend(const BackendOptions& options) : shared_(std::make_shared<Shared>()) {
    shared_->options = options;
  }
  const char* name() const override { return "cuda"; }
  Status CheckAvailable() override { return CheckCudaDeviceVisible(); }
  BackendStats Stats() const override { return {shared_->mappings.count(), shared_->mappings.bytes()}; }
  std::optional<std::string> Problem() const override { return shared_->pinner.Problem(); }

  Result<std::unique_ptr<KvContext>> Open(const KvLayout& layout, PoolView pool) override {
    LMC_RETURN_IF_ERROR(CheckCudaDeviceVisible());
    LMC_ASSIGN_OR_RETURN(const int device, DeviceOfUuid(layout.device_uuid));
    LMC_CUDA_RETURN(cudaSetDevice(device));  // before anything that makes a context
    shared_->pinner.Start(device, pool.bytes);
    auto context = std::make_unique<CudaContext>(shared_, device, layout, pool);
    LMC_RETURN_IF_ERROR(context->Init());
    return std::unique_ptr<KvContext>(std::move(context));
  }

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace

std::unique_ptr<KvBackend> MakeCudaBackend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace lmcache::gpu
