#include "gpu/emulated_backend.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "gpu/host_kv_copy.h"
#include "gpu/torch_ipc_refcount.h"
#include "shm/shm_segment.h"

namespace lmcache::gpu {
namespace {

using Segment = std::shared_ptr<shm::ShmSegment>;
using MemoryHandle = std::array<std::uint8_t, protocol::kCudaIpcHandleBytes>;

constexpr char kMemoryMagic[8] = {'L', 'M', 'C', 'E', 'M', 'U', 'M', '\0'};
constexpr char kEventMagic[8] = {'L', 'M', 'C', 'E', 'M', 'U', 'E', '\0'};
constexpr std::size_t kEventNameAt = 24;
constexpr std::uint64_t kServerEventWords = 4096;

std::uint64_t LoadLE(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void StoreLE(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

// The NUL-terminated name in bytes [from, 64) of a handle.
Result<std::string> NameIn(std::span<const std::uint8_t> handle, std::size_t from, const char* what) {
  const auto* begin = reinterpret_cast<const char*>(handle.data()) + from;
  const std::size_t length = strnlen(begin, handle.size() - from);
  if (length == 0 || length == handle.size() - from) {
    return Status(ErrorCode::kInvalidArgument, std::string(what) + " names no segment");
  }
  return std::string(begin, length);
}

std::atomic_ref<std::uint64_t> WordAt(const shm::ShmSegment& segment, std::uint64_t offset) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(segment.base() + offset));
}

// Segments mapped by handle, each once however many contexts use it; the
// mapping closes when the last context holding it is destroyed.
class Mappings {
 public:
  Result<Segment> Open(const std::string& name) LMC_EXCLUDES(mu_) {
    // A client naming the server's own segments would have the copies write
    // into the L1 pool or the server's events.
    if (name.starts_with("lmcache_l1_pool_") || name.starts_with("lmcache_gpu_events_")) {
      return Status(ErrorCode::kPermissionDenied,
                    "the emulated device memory " + name + " is one of the server's own segments");
    }
    MutexLock lock(&mu_);
    if (Segment live = open_[name].lock()) return live;
    auto attached = shm::ShmSegment::Attach(name, 0);
    if (!attached.ok()) {
      return Status(ErrorCode::kInvalidArgument, "cannot open the emulated device memory " + name +
                                                     ": " + attached.status().message());
    }
    Segment segment(std::move(*attached));
    open_[name] = segment;
    return segment;
  }
  BackendStats Stats() const LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    BackendStats s;
    for (const auto& [name, weak] : open_) {
      if (Segment live = weak.lock()) {
        s.mapped_allocations += 1;
        s.mapped_bytes += live->size();
      }
    }
    return s;
  }

 private:
  mutable Mutex mu_;
  std::map<std::string, std::weak_ptr<shm::ShmSegment>> open_ LMC_GUARDED_BY(mu_);
};

// The server's own events: words of one segment, created at first use.
class ServerEvents {
 public:
  struct Exported {
    EventHandle handle{};
    std::uint64_t offset = 0;
    std::uint64_t value = 0;
  };
  Result<Exported> Export() LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (!segment_) {
      shm::CreateOptions options;
      options.name = "lmcache_gpu_events_" + std::to_string(getpid());
      options.size_bytes = kServerEventWords * 8;
      LMC_ASSIGN_OR_RETURN(segment_, shm::ShmSegment::Create(options));
    }
    const std::uint64_t n = next_++;
    Exported e;
    e.offset = (n % kServerEventWords) * 8;
    e.value = n / kServerEventWords + 1;
    e.handle = EmulatedEventHandle(segment_->name(), e.offset, e.value);
    return e;
  }
  void Complete(const Exported& e, bool ok) LMC_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    WordAt(*segment_, e.offset).store(ok ? e.value : (e.value | kEventFailedBit), std::memory_order_release);
  }

 private:
  Mutex mu_;
  std::unique_ptr<shm::ShmSegment> segment_ LMC_GUARDED_BY(mu_);
  std::uint64_t next_ LMC_GUARDED_BY(mu_) = 0;
};

struct Shared {
  Mappings mappings;
  ServerEvents events;
  BackendOptions options;
};

class EmulatedContext final : public KvContext {
 public:
  // `bases[g][l]`: layer l of group g, in a mapping `segments` keep open.
  EmulatedContext(std::shared_ptr<Shared> shared, const KvLayout& layout, PoolView pool,
                  std::vector<Segment> segments, std::vector<std::vector<std::byte*>> bases)
      : shared_(std::move(shared)),
        layout_(layout),
        pool_(pool),
        segments_(std::move(segments)),
        bases_(std::move(bases)),
        thread_([this] { Run(); }) {}

  ~EmulatedContext() override {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    work_.NotifyAll();
    thread_.join();
    ReleaseTorchRefCounters(layout_.tensors);  // after the last copy, as the mappings close
  }

  Result<EventHandle> Enqueue(Direction direction, const EventHandle& engine_event,
                              std::vector<ChunkTransfer> chunks,
                              std::function<void(const Status&)> done) override {
    LMC_ASSIGN_OR_RETURN(const ServerEvents::Exported event, shared_->events.Export());
    {
      MutexLock lock(&mu_);
      queue_.push_back(Job{direction, engine_event, std::move(chunks), std::move(done), event});
    }
    work_.NotifyAll();
    return event.handle;
  }

  Result<EventHandle> FailedEvent() override {
    LMC_ASSIGN_OR_RETURN(const ServerEvents::Exported event, shared_->events.Export());
    shared_->events.Complete(event, false);
    return event.handle;
  }

  bool Drain(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(&mu_);
    while (!queue_.empty() || running_) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      idle_.WaitFor(&lock, deadline - now);
    }
    return true;
  }

  std::size_t in_flight() const override {
    MutexLock lock(&mu_);
    return queue_.size() + (running_ ? 1 : 0);
  }

 private:
  struct Job {
    Direction direction;
    EventHandle engine_event;
    std::vector<ChunkTransfer> chunks;
    std::function<void(const Status&)> done;
    ServerEvents::Exported event;
  };

  void Run() {
    while (true) {
      Job job;
      bool closing = false;
      {
        MutexLock lock(&mu_);
        while (!stop_ && queue_.empty()) work_.Wait(&lock);
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
        closing = stop_;
      }
      // Stopping with work queued (server shutdown): fail it, copy nothing.
      Status status = closing ? Status(ErrorCode::kUnavailable, "the GPU context is closing")
                              : WaitForEngine(job.engine_event);
      if (status.ok()) status = Copy(job);
      job.done(status);  // published before the engine can see the event complete
      shared_->events.Complete(job.event, status.ok());
      {
        MutexLock lock(&mu_);
        running_ = false;
      }
      idle_.NotifyAll();
    }
  }

  Status Copy(const Job& job) const {
    for (const ChunkTransfer& chunk : job.chunks) {
      if (chunk.groups.empty()) continue;
      LMC_ASSIGN_OR_RETURN(std::byte* object, ResolveObject(pool_, chunk.object_offset, layout_.object_bytes));
      for (const GroupCopy& part : chunk.groups) {
        const KvGroupLayout& g = layout_.groups[part.group];
        const kv::ChunkCopy c{g.paged, g.object(), part.block_ids.data(), g.slots, part.skip_tokens};
        if (job.direction == Direction::kStore) {
          HostGather(c, bases_[part.group], object + g.object_offset);
        } else {
          HostScatter(c, bases_[part.group], object + g.object_offset);
        }
      }
    }
    return Status::Ok();
  }

  // The copy reads the cache only once the engine's event is complete.
  Status WaitForEngine(const EventHandle& handle) {
    if (NoEngineEvent(handle)) return {};
    if (std::memcmp(handle.data(), kEventMagic, sizeof(kEventMagic)) != 0) {
      return Status(ErrorCode::kInvalidArgument, "the engine's event handle is not an emulated one");
    }
    const std::uint64_t offset = LoadLE(handle.data() + 8);
    const std::uint64_t value = LoadLE(handle.data() + 16);
    LMC_ASSIGN_OR_RETURN(const std::string name, NameIn(handle, kEventNameAt, "the engine's event"));
    LMC_ASSIGN_OR_RETURN(const Segment segment, shared_->mappings.Open(name));
    if (segment->size() < 8 || offset % 8 != 0 || offset > segment->size() - 8) {
      return Status(ErrorCode::kInvalidArgument, "the engine's event lies outside its segment");
    }
    return PollEngineEvent(
        [&]() -> Result<bool> {
          const std::uint64_t word = WordAt(*segment, offset).load(std::memory_order_acquire);
          if (word & kEventFailedBit) return Status(ErrorCode::kInternal, "the engine's event failed");
          return word >= value;
        },
        std::chrono::steady_clock::now() + shared_->options.event_timeout);
  }

  const std::shared_ptr<Shared> shared_;
  const KvLayout layout_;
  const PoolView pool_;
  const std::vector<Segment> segments_;  // keeps the mappings open
  const std::vector<std::vector<std::byte*>> bases_;
  mutable Mutex mu_;
  CondVar work_;
  CondVar idle_;
  std::deque<Job> queue_ LMC_GUARDED_BY(mu_);
  bool running_ LMC_GUARDED_BY(mu_) = false;
  bool stop_ LMC_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

class EmulatedBackend final : public KvBackend {
 public:
  explicit EmulatedBackend(const BackendOptions& options) : shared_(std::make_shared<Shared>()) {
    shared_->options = options;
  }
  const char* name() const override { return "emulated"; }
  Status CheckAvailable() override { return {}; }
  BackendStats Stats() const override { return shared_->mappings.Stats(); }

  Result<std::unique_ptr<KvContext>> Open(const KvLayout& layout, PoolView pool) override {
    std::vector<Segment> segments;  // one per tensor, each mapping shared by handle
    for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
      LMC_ASSIGN_OR_RETURN(Segment segment, MapTensor(layout.tensors[i], i));
      segments.push_back(std::move(segment));
    }
    std::vector<std::vector<std::byte*>> bases;
    for (const KvGroupLayout& g : layout.groups) {
      std::vector<std::byte*>& group = bases.emplace_back();
      for (const LayerRef& l : g.layers) group.push_back(segments[l.tensor]->base() + l.first_byte);
    }
    return std::unique_ptr<KvContext>(
        new EmulatedContext(shared_, layout, pool, std::move(segments), std::move(bases)));
  }

 private:
  // The tensor's allocation, mapped, with its storage and view inside what was mapped.
  Result<Segment> MapTensor(const protocol::DeviceIpcWrapper& t, std::size_t i) {
    if (std::memcmp(t.mem_handle.data(), kMemoryMagic, sizeof(kMemoryMagic)) != 0) {
      return Status(ErrorCode::kInvalidArgument,
                    "kv_cache[" + std::to_string(i) +
                        "]: not an emulated memory handle (this server runs --gpu-backend emulated)");
    }
    LMC_ASSIGN_OR_RETURN(const std::string name, NameIn(t.mem_handle, 8, "a memory handle"));
    LMC_ASSIGN_OR_RETURN(Segment segment, shared_->mappings.Open(name));
    LMC_RETURN_IF_ERROR(CheckInsideAllocation(t, i, segment->size()));
    return segment;
  }

  std::shared_ptr<Shared> shared_;
};

}  // namespace

std::unique_ptr<KvBackend> MakeEmulatedBackend(const BackendOptions& options) {
  return std::make_unique<EmulatedBackend>(options);
}

MemoryHandle EmulatedMemoryHandle(const std::string& shm_name) {
  MemoryHandle h{};
  std::memcpy(h.data(), kMemoryMagic, sizeof(kMemoryMagic));
  std::memcpy(h.data() + 8, shm_name.data(), std::min(shm_name.size(), h.size() - 9));
  return h;
}

EventHandle EmulatedEventHandle(const std::string& shm_name, std::uint64_t offset, std::uint64_t value) {
  EventHandle h{};
  std::memcpy(h.data(), kEventMagic, sizeof(kEventMagic));
  StoreLE(h.data() + 8, offset);
  StoreLE(h.data() + 16, value);
  std::memcpy(h.data() + kEventNameAt, shm_name.data(), std::min(shm_name.size(), h.size() - kEventNameAt - 1));
  return h;
}

}  // namespace lmcache::gpu
