// The CUDA backend of the CUDA-IPC path (built with the toolkit). No CUDA call
// is made before the first registration (field notes #4019); the L1 pool is
// pinned then, in the background, on the registering worker's device
// (cuda_mappings.h), and a device is touched only when a worker registers
// tensors on it.
//
// Per context: one stream, a device staging buffer of one object, each
// group's array of layer base addresses, a ring of block ids (pinned host
// memory and its device twin, block_id_ring.h), a control block in pinned
// host memory the device reads (a gate word and one cancel slot per queued
// transfer), and a host thread. A transfer is queued whole by the request
// thread (Enqueue), in ticket order on the stream:
//   wait until gate >= ticket (cuStreamWaitValue64 on host memory);
//   the block ids up (pinned: asynchronous);
//   per chunk: the gather kernel and D2H into the L1 object, or H2D and the
//   scatter kernel (a kernel whose cancel slot holds its ticket copies nothing);
//   the host function that calls `done` (so a store is published before...);
//   the record of the server's interprocess event, returned at once.
// The host thread then takes the transfers in ticket order: it waits for the
// pool's pin and polls the engine's imported event (at most
// --gpu-event-timeout-ms from the transfer's arrival), marks the transfer
// cancelled if either failed, and opens the gate. Only the host opens a
// gate, never device work, so no stream waits on another and a dead engine
// leaves nothing blocked: its transfers fail at their deadline, its stream
// goes idle, and its mappings close (LMCache #4980). Mappings are shared per
// (device, handle), bounded by the allocation's real extent, and closed with
// the last context using them.
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "gpu/block_id_ring.h"
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
constexpr std::uint64_t kBlockIdRingIds = 2u << 20;  // 8 MiB of block ids per context

// Pinned host memory the device reads: the gate and the cancel slots.
struct Control {
  std::uint64_t gate;  // transfers with ticket <= gate may run
  std::uint64_t padding[15];
  std::uint64_t cancelled[kMaxQueuedTransfers];  // [ticket % N] == ticket: copy nothing
};

struct Shared {
  CudaMappings mappings;
  PoolPinner pinner;
  BackendOptions options;
};

// What the stream's host function completes; owned by it once launched.
struct CudaJob {
  std::function<void(const Status&)> done;
  Status status;  // written by the host thread before it opens the gate
  BlockIdRing* ring = nullptr;
  std::uint64_t ids_at = 0;
  std::atomic<std::size_t>* in_flight = nullptr;
};

void CUDART_CB JobFinished(void* data) {
  std::unique_ptr<CudaJob> job(static_cast<CudaJob*>(data));
  job->done(job->status);
  job->ring->Release(job->ids_at);
  job->in_flight->fetch_sub(1, std::memory_order_acq_rel);
}

// A transfer the host thread has yet to let run.
struct Pending {
  std::uint64_t ticket = 0;
  EventHandle engine_event{};
  std::chrono::steady_clock::time_point deadline;
  CudaJob* job = nullptr;  // the stream's; its status is ours to set until the gate opens
  bool gated = false;      // its stream work waits for the gate (else its status was set before)
  Status refused;          // failed while it was queued: cancel it
};

class CudaContext final : public KvContext {
 public:
  CudaContext(std::shared_ptr<Shared> shared, int device, const KvLayout& layout, PoolView pool)
      : shared_(std::move(shared)), device_(device), layout_(layout), pool_(pool), ring_(kBlockIdRingIds) {}

  Status Init() {
    LMC_ASSIGN_OR_RETURN(driver_, Driver());
    LMC_CUDA_RETURN(cudaSetDevice(device_));
    std::vector<std::byte*> tensor_bases;
    for (std::size_t i = 0; i < layout_.tensors.size(); ++i) {
      LMC_ASSIGN_OR_RETURN(std::byte* base, MapTensor(i));
      tensor_bases.push_back(base);
    }
    for (const protocol::DeviceIpcWrapper& t : layout_.tensors) {
      if (t.event_sync_required) {
        LMC_RETURN_IF_ERROR(WaitForEngine(t.event_handle, Deadline()));
      }
    }
    LMC_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    LMC_CUDA_RETURN(cudaHostAlloc(reinterpret_cast<void**>(&control_), sizeof(Control),
                                  cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(control_, 0, sizeof(Control));
    LMC_CUDA_RETURN(cudaHostGetDevicePointer(reinterpret_cast<void**>(&control_device_), control_, 0));
    LMC_CUDA_RETURN(cudaHostAlloc(reinterpret_cast<void**>(&host_ids_), ring_.capacity() * 4, cudaHostAllocPortable));
    // Stream-ordered, then synchronized: nothing on the legacy stream races the first kernel.
    LMC_CUDA_RETURN(cudaMallocAsync(reinterpret_cast<void**>(&device_ids_), ring_.capacity() * 4, stream_));
    LMC_CUDA_RETURN(cudaMallocAsync(&staging_, std::max<std::uint64_t>(layout_.object_bytes, 16), stream_));
    std::vector<std::vector<std::uint64_t>> bases;
    for (const KvGroupLayout& g : layout_.groups) {
      std::vector<std::uint64_t>& group = bases.emplace_back();
      for (const LayerRef& l : g.layers) {
        group.push_back(reinterpret_cast<std::uint64_t>(tensor_bases[l.tensor] + l.first_byte));
      }
      std::uint64_t* device_bases = nullptr;
      LMC_CUDA_RETURN(cudaMallocAsync(reinterpret_cast<void**>(&device_bases), group.size() * 8, stream_));
      group_bases_.push_back(device_bases);
      LMC_CUDA_RETURN(cudaMemcpyAsync(device_bases, group.data(), group.size() * 8, cudaMemcpyHostToDevice, stream_));
    }
    // Stream memory operations on host memory are what gates every transfer: check them now.
    LMC_RETURN_IF_ERROR(WaitGate(0));
    LMC_CUDA_RETURN(cudaStreamSynchronize(stream_));
    thread_ = std::thread([this] { Run(); });
    return {};
  }

  ~CudaContext() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    work_.NotifyAll();
    if (thread_.joinable()) thread_.join();  // it opened every gate, cancelling what it had not run
    cudaSetDevice(device_);
    if (stream_) {
      cudaStreamSynchronize(stream_);
      for (std::uint64_t* bases : group_bases_) cudaFreeAsync(bases, stream_);
      if (staging_) cudaFreeAsync(staging_, stream_);
      if (device_ids_) cudaFreeAsync(device_ids_, stream_);
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    {
      MutexLock lock(&mu_);
      for (cudaEvent_t e : exported_) cudaEventDestroy(e);
    }
    if (host_ids_) cudaFreeHost(host_ids_);
    if (control_) cudaFreeHost(control_);
    for (std::size_t i = 0; i < mapped_; ++i) shared_->mappings.Close(device_, layout_.tensors[i].mem_handle);
    ReleaseTorchRefCounters(layout_.tensors);
  }

  Result<EventHandle> Enqueue(Direction direction, const EventHandle& engine_event,
                              std::vector<ChunkTransfer> chunks,
                              std::function<void(const Status&)> done) override {
    auto job = std::make_unique<CudaJob>();
    job->done = std::move(done);
    job->ring = &ring_;
    job->in_flight = &in_flight_;
    Result<EventHandle> queued = QueueTransfer(direction, engine_event, chunks, &job);
    // Refused before anything reached the stream: nothing can still touch the objects.
    if (job) job->done(queued.status());
    return queued;
  }

  Result<EventHandle> FailedEvent() override {
    // Never recorded, so complete at once for whoever imports it.
    MutexLock lock(&mu_);
    LMC_CUDA_RETURN(cudaSetDevice(device_));
    cudaEvent_t event = nullptr;
    LMC_CUDA_RETURN(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess));
    return Export(event);
  }

  bool Drain(std::chrono::milliseconds timeout) override {
    // Polled, never synchronized: a caller must not hang on the device.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      cudaSetDevice(device_);
      if (in_flight_.load() == 0 && cudaStreamQuery(stream_) != cudaErrorNotReady) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::size_t in_flight() const override { return in_flight_.load(std::memory_order_acquire); }

 private:
  std::chrono::steady_clock::time_point Deadline() const {
    return std::chrono::steady_clock::now() + shared_->options.event_timeout;
  }

  Result<std::byte*> MapTensor(std::size_t i) {
    const protocol::DeviceIpcWrapper& t = layout_.tensors[i];
    LMC_ASSIGN_OR_RETURN(const MappedAllocation mapped, shared_->mappings.Open(device_, t.mem_handle));
    mapped_ = i + 1;
    LMC_RETURN_IF_ERROR(CheckInsideAllocation(t, i, mapped.size));
    return mapped.base;
  }

  Status WaitGate(std::uint64_t ticket) {
    const CUresult r = driver_->stream_wait_value64(reinterpret_cast<CUstream>(stream_),
                                                   reinterpret_cast<CUdeviceptr>(&control_device_->gate),
                                                   ticket, CU_STREAM_WAIT_VALUE_GEQ);
    return r == CUDA_SUCCESS ? Status::Ok() : DriverError("cuStreamWaitValue64", r);
  }

  Result<EventHandle> Export(cudaEvent_t event) LMC_REQUIRES(mu_) {
    while (exported_.size() >= kRetainedEvents && cudaEventQuery(exported_.front()) == cudaSuccess) {
      cudaEventDestroy(exported_.front());
      exported_.pop_front();
    }
    exported_.push_back(event);  // kept until complete and 4096 exports old
    cudaIpcEventHandle_t h;
    LMC_CUDA_RETURN(cudaIpcGetEventHandle(&h, event));
    EventHandle handle{};
    std::memcpy(handle.data(), &h, sizeof(h));
    return handle;
  }

  // Queues a whole transfer behind its gate. On success `*job` is the
  // stream's (and null here); on a refusal before the gate it is still ours.
  Result<EventHandle> QueueTransfer(Direction direction, const EventHandle& engine_event,
                                    const std::vector<ChunkTransfer>& chunks, std::unique_ptr<CudaJob>* job) {
    std::uint64_t ids = 0;
    for (const ChunkTransfer& c : chunks) {
      for (const GroupCopy& g : c.groups) ids += g.block_ids.size();
    }
    MutexLock lock(&mu_);  // ticket order is queue order is stream order
    if (stopping_) return Status(ErrorCode::kUnavailable, "the GPU context is closing");
    if (pending_.size() + in_flight_.load() >= kMaxQueuedTransfers) {
      return Status(ErrorCode::kUnavailable, "too many GPU transfers queued for this worker");
    }
    LMC_CUDA_RETURN(cudaSetDevice(device_));  // events are made on the caller's current device
    const std::optional<std::uint64_t> at = ring_.Reserve(ids);
    if (!at) {
      return Status(ErrorCode::kUnavailable, "the block ids of this worker's queued GPU transfers "
                                             "fill their buffer; retry when some completed");
    }
    Pending pending;
    pending.ticket = ++next_ticket_;
    pending.engine_event = engine_event;
    pending.deadline = Deadline();
    control_->cancelled[pending.ticket % kMaxQueuedTransfers] = 0;
    (*job)->ids_at = *at;
    pending.job = job->get();
    // From here on the gate must be opened, whatever fails: the host thread does it.
    Status status = WaitGate(pending.ticket);
    pending.gated = status.ok();
    if (status.ok()) status = QueueCopies(direction, chunks, *at, pending.ticket);
    // Ungated, the host function may run at once: its outcome is known now.
    if (!pending.gated) (*job)->status = status;
    const cudaError_t launched = cudaLaunchHostFunc(stream_, JobFinished, job->get());
    if (launched == cudaSuccess) {
      in_flight_.fetch_add(1, std::memory_order_acq_rel);
      static_cast<void>(job->release());
    } else {
      // When the queued copies end is unknown: the objects stay leased (pinned)
      // rather than being reused under a copy, and their ids stay reserved.
      spdlog::error("GPU transfer {} cannot complete in stream order ({}); its L1 objects stay locked",
                    pending.ticket, cudaGetErrorString(launched));
      static_cast<void>(job->release());
      pending.job = nullptr;
      if (status.ok()) status = CudaError("cudaLaunchHostFunc", launched);
    }
    Result<EventHandle> handle = status;
    cudaEvent_t event = nullptr;
    if (status.ok()) status = CudaStatus("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess));
    if (status.ok()) status = CudaStatus("cudaEventRecord", cudaEventRecord(event, stream_));
    if (status.ok()) handle = Export(event);
    if (!handle.ok()) pending.refused = handle.status();
    pending_.push_back(pending);
    work_.NotifyAll();
    return handle;
  }

  static Status CudaStatus(const char* call, cudaError_t error) {
    return error == cudaSuccess ? Status::Ok() : CudaError(call, error);
  }

  Status QueueCopies(Direction direction, const std::vector<ChunkTransfer>& chunks, std::uint64_t ids_at,
                     std::uint64_t ticket) LMC_REQUIRES(mu_) {
    std::uint64_t at = ids_at;
    for (const ChunkTransfer& c : chunks) {
      for (const GroupCopy& g : c.groups) {
        std::memcpy(host_ids_ + at, g.block_ids.data(), g.block_ids.size() * 4);
        at += g.block_ids.size();
      }
    }
    if (at > ids_at) {
      LMC_CUDA_RETURN(cudaMemcpyAsync(device_ids_ + ids_at, host_ids_ + ids_at, (at - ids_at) * 4,
                                      cudaMemcpyHostToDevice, stream_));
    }
    const kv::Cancellation cancel{&control_device_->cancelled[ticket % kMaxQueuedTransfers], ticket};
    at = ids_at;
    for (const ChunkTransfer& chunk : chunks) {
      if (chunk.groups.empty()) continue;
      LMC_RETURN_IF_ERROR(QueueChunk(direction, chunk, &at, cancel));
    }
    return {};
  }

  Status QueueChunk(Direction direction, const ChunkTransfer& chunk, std::uint64_t* at, kv::Cancellation cancel)
      LMC_REQUIRES(mu_) {
    LMC_ASSIGN_OR_RETURN(std::byte* object, ResolveObject(pool_, chunk.object_offset, layout_.object_bytes));
    auto* staging = static_cast<std::uint8_t*>(staging_);
    if (direction == Direction::kRetrieve) {
      LMC_CUDA_RETURN(cudaMemcpyAsync(staging, object, layout_.object_bytes, cudaMemcpyHostToDevice, stream_));
    }
    for (const GroupCopy& part : chunk.groups) {
      const KvGroupLayout& g = layout_.groups[part.group];
      const kv::ChunkCopy copy{g.paged, g.object(), device_ids_ + *at, g.slots, part.skip_tokens};
      *at += part.block_ids.size();
      std::uint8_t* in_object = staging + g.object_offset;
      const int e = direction == Direction::kStore
                        ? kv::LaunchGather(copy, group_bases_[part.group], in_object, stream_, cancel)
                        : kv::LaunchScatter(copy, group_bases_[part.group], in_object, stream_, cancel);
      if (e != 0) return CudaError(direction == Direction::kStore ? "gather" : "scatter", static_cast<cudaError_t>(e));
    }
    if (direction == Direction::kStore) {
      LMC_CUDA_RETURN(cudaMemcpyAsync(object, staging, layout_.object_bytes, cudaMemcpyDeviceToHost, stream_));
    }
    return {};
  }

  void Run() {
    cudaSetDevice(device_);
    while (true) {
      Pending next;
      bool closing = false;
      {
        MutexLock lock(&mu_);
        while (!stopping_ && pending_.empty()) work_.Wait(&lock);
        if (pending_.empty()) return;
        next = pending_.front();
        pending_.pop_front();
        closing = stopping_;
      }
      Status status = next.refused;
      if (status.ok() && closing) status = Status(ErrorCode::kUnavailable, "the GPU context is closing");
      if (status.ok()) status = shared_->pinner.Wait();
      if (status.ok()) status = WaitForEngine(next.engine_event, next.deadline);
      Open(next, status);
    }
  }

  // Lets the transfer's stream work run: copying, or (failed) cancelled.
  void Open(const Pending& next, const Status& status) {
    if (next.job != nullptr && next.gated) next.job->status = status;
    if (!status.ok()) {
      std::atomic_ref<std::uint64_t>(control_->cancelled[next.ticket % kMaxQueuedTransfers])
          .store(next.ticket, std::memory_order_release);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);  // job status and cancel slot before the gate
    std::atomic_ref<std::uint64_t>(control_->gate).store(next.ticket, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  // Polls the engine's event on this thread: the device never waits on it.
  Status WaitForEngine(const EventHandle& handle, std::chrono::steady_clock::time_point deadline) {
    if (NoEngineEvent(handle)) return {};
    cudaIpcEventHandle_t h;
    std::memcpy(&h, handle.data(), sizeof(h));
    cudaEvent_t engine = nullptr;
    LMC_CUDA_RETURN(cudaIpcOpenEventHandle(&engine, h));
    const Status status = PollEngineEvent(
        [engine]() -> Result<bool> {
          const cudaError_t state = cudaEventQuery(engine);
          if (state == cudaSuccess) return true;
          if (state == cudaErrorNotReady) return false;
          return CudaError("cudaEventQuery (the engine's event)", state);
        },
        deadline);
    cudaEventDestroy(engine);
    return status;
  }

  const std::shared_ptr<Shared> shared_;
  const int device_;
  const KvLayout layout_;
  const PoolView pool_;
  const DriverCalls* driver_ = nullptr;
  std::size_t mapped_ = 0;  // tensors whose mapping this context holds
  cudaStream_t stream_ = nullptr;
  Control* control_ = nullptr;         // pinned host memory
  Control* control_device_ = nullptr;  // the same, as the device addresses it
  std::int32_t* host_ids_ = nullptr;   // pinned
  std::int32_t* device_ids_ = nullptr;
  void* staging_ = nullptr;
  std::vector<std::uint64_t*> group_bases_;
  BlockIdRing ring_;
  std::atomic<std::size_t> in_flight_{0};  // launched on the stream, `done` not yet run
  Mutex mu_;
  CondVar work_;
  bool stopping_ LMC_GUARDED_BY(mu_) = false;
  std::uint64_t next_ticket_ LMC_GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ LMC_GUARDED_BY(mu_);
  std::deque<cudaEvent_t> exported_ LMC_GUARDED_BY(mu_);
  std::thread thread_;
};

class CudaBackend final : public KvBackend {
 public:
  explicit CudaBackend(const BackendOptions& options) : shared_(std::make_shared<Shared>()) {
    shared_->options = options;
    // Each context's stream waits on its gate: with the runtime's default of 8
    // hardware queues, contexts on one GPU would share them and wait behind
    // one another's gates. Set before the first CUDA call; an operator's value wins.
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
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
