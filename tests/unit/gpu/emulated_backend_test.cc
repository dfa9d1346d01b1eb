// The emulated backend: a transfer waits for the engine's event word, copies
// with the emulation's gather/scatter, completes the server's event word (or
// marks it failed) and calls `done` once; mappings are shared per allocation
// and closed with their last context.
#include "gpu/emulated_backend.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "fakes/vllm_kv_cache.h"
#include "gpu/host_kv_copy.h"
#include "shm/shm_segment.h"

namespace lmcache::gpu {
namespace {

namespace fake = lmcache::testing;

constexpr std::int64_t kChunk = 32;

std::string Name(const char* what) {
  static std::atomic<int> n{0};
  return std::string("lmc_emu_test_") + what + "_" + std::to_string(getpid()) + "_" +
         std::to_string(n++);
}

std::unique_ptr<shm::ShmSegment> Segment(const std::string& name, std::uint64_t bytes) {
  shm::CreateOptions o;
  o.name = name;
  o.size_bytes = bytes;
  auto s = shm::ShmSegment::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::uint64_t& Word(const shm::ShmSegment& s, std::uint64_t offset) {
  return *reinterpret_cast<std::uint64_t*>(s.base() + offset);
}

// The word a server event handle names, in its own mapping.
struct ServerWord {
  std::unique_ptr<shm::ShmSegment> segment;
  std::uint64_t offset = 0;
  std::uint64_t value = 0;
  std::uint64_t Load() const {
    return std::atomic_ref<std::uint64_t>(Word(*segment, offset)).load(std::memory_order_acquire);
  }
};
ServerWord Open(const EventHandle& h) {
  ServerWord w;
  std::memcpy(&w.offset, h.data() + 8, 8);
  std::memcpy(&w.value, h.data() + 16, 8);
  auto attached = shm::ShmSegment::Attach(reinterpret_cast<const char*>(h.data() + 24), 0);
  EXPECT_TRUE(attached.ok()) << attached.status().ToString();
  w.segment = std::move(attached).value();
  return w;
}

class EmulatedBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    memory_name_ = Name("kv");
    events_name_ = Name("ev");
    // vLLM >= 0.29: two layers' packed [NB, NH, BS, 2*HS] views into one allocation.
    fake::Geometry g;
    g.layers = 2;
    g.blocks = 8;
    g.block_size = 16;
    g.heads = 2;
    g.head_size = 32;
    cache_ = fake::MakeCache(fake::Layout::kSharedLbhnc, g, EmulatedMemoryHandle(memory_name_));
    memory_ = Segment(memory_name_, cache_.allocation_bytes);
    events_ = Segment(events_name_, 4096);
    for (std::uint64_t i = 0; i < memory_->size(); ++i) memory_->base()[i] = std::byte(i * 13 % 251);
    layout_ = *DetectKvLayout(fake::Registration({&cache_}), kChunk);
    pool_.resize(4 * layout_.object_bytes);
    backend_ = MakeEmulatedBackend(BackendOptions{std::chrono::milliseconds(300)});
  }

  PoolView Pool() { return PoolView{std::span<std::byte>(pool_)}; }
  std::byte* Object(std::size_t i) { return pool_.data() + i * layout_.object_bytes; }
  std::vector<ChunkTransfer> OneChunk(std::size_t object) const {
    ChunkTransfer c;
    c.object_offset = object * layout_.object_bytes;
    c.groups.push_back({0, {3, 1}, 0});
    return {c};
  }
  std::vector<std::byte*> Bases() const {
    std::vector<std::byte*> bases;
    for (const LayerRef& l : layout_.groups[0].layers) bases.push_back(memory_->base() + l.first_byte);
    return bases;
  }

  std::string memory_name_, events_name_;
  fake::Cache cache_;
  std::unique_ptr<shm::ShmSegment> memory_, events_;
  KvLayout layout_;
  std::vector<std::byte> pool_;
  std::unique_ptr<KvBackend> backend_;
};

TEST_F(EmulatedBackendTest, AStoreWaitsForTheEngineEventThenCopiesAndCompletesItsEvent) {
  auto context = backend_->Open(layout_, Pool());
  ASSERT_TRUE(context.ok()) << context.status().ToString();
  std::atomic<int> done{0};
  Status seen = Internal("not called");
  auto event = (*context)->Enqueue(Direction::kStore, EmulatedEventHandle(events_name_, 8, 5),
                                   OneChunk(1), [&](const Status& s) {
                                     seen = s;
                                     done.fetch_add(1);
                                   });
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  const ServerWord server = Open(*event);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(done.load(), 0) << "copied before the engine's event";
  EXPECT_LT(server.Load(), server.value);
  std::atomic_ref<std::uint64_t>(Word(*events_, 8)).store(5, std::memory_order_release);
  ASSERT_TRUE((*context)->Drain(std::chrono::seconds(5)));
  EXPECT_EQ(done.load(), 1);
  EXPECT_TRUE(seen.ok()) << seen.ToString();
  EXPECT_EQ(server.Load(), server.value);
  // The very bytes the emulation's gather gives.
  std::vector<std::byte> expected(layout_.object_bytes);
  const std::vector<std::int32_t> ids = {3, 1};
  const KvGroupLayout& g = layout_.groups[0];
  HostGather({g.paged, g.object(), ids.data(), kChunk, 0}, Bases(), expected.data());
  EXPECT_EQ(std::vector<std::byte>(Object(1), Object(2)), expected);
}

TEST_F(EmulatedBackendTest, AnEventThatNeverCompletesFailsTheTransferAndItsServerEvent) {
  auto context = backend_->Open(layout_, Pool());
  ASSERT_TRUE(context.ok());
  std::fill(pool_.begin(), pool_.end(), std::byte{0x5a});
  const std::vector<std::byte> before(memory_->base(), memory_->base() + memory_->size());
  Status seen;
  auto event = (*context)->Enqueue(Direction::kRetrieve, EmulatedEventHandle(events_name_, 16, 1),
                                   OneChunk(0), [&](const Status& s) { seen = s; });
  ASSERT_TRUE(event.ok());
  const ServerWord server = Open(*event);
  ASSERT_TRUE((*context)->Drain(std::chrono::seconds(5)));
  EXPECT_EQ(seen.code(), ErrorCode::kTimeout) << seen.ToString();
  EXPECT_EQ(server.Load(), server.value | kEventFailedBit);
  EXPECT_EQ(std::vector<std::byte>(memory_->base(), memory_->base() + memory_->size()), before)
      << "a failed retrieve wrote the cache";
}

TEST_F(EmulatedBackendTest, MappingsAreSharedPerAllocationAndClosedWithTheLastContext) {
  {
    auto a = backend_->Open(layout_, Pool());
    auto b = backend_->Open(layout_, Pool());
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(backend_->Stats().mapped_allocations, 1u);
    a->reset();
    EXPECT_EQ(backend_->Stats().mapped_allocations, 1u);
  }
  EXPECT_EQ(backend_->Stats().mapped_allocations, 0u);
}

TEST_F(EmulatedBackendTest, RefusesHandlesItCannotMapOrTensorsPastTheirAllocation) {
  KvLayout foreign = layout_;
  foreign.tensors[0].mem_handle.fill(7);  // a real cudaIpcMemHandle_t, say
  EXPECT_EQ(backend_->Open(foreign, Pool()).status().code(), ErrorCode::kInvalidArgument);
  KvLayout gone = layout_;
  gone.tensors[1].mem_handle = EmulatedMemoryHandle(Name("missing"));
  EXPECT_EQ(backend_->Open(gone, Pool()).status().code(), ErrorCode::kInvalidArgument);
  KvLayout pool = layout_;
  pool.tensors[0].mem_handle = EmulatedMemoryHandle("lmcache_l1_pool_1234");
  EXPECT_EQ(backend_->Open(pool, Pool()).status().code(), ErrorCode::kPermissionDenied);
  // The client claims more than the allocation holds: bounded by the mapping's real size.
  KvLayout past = layout_;
  past.tensors[1].storage_bytes = memory_->size() + 64;
  EXPECT_NE(backend_->Open(past, Pool()).status().message().find("reaches byte"), std::string::npos);
  EXPECT_EQ(backend_->Stats().mapped_allocations, 0u);
}

}  // namespace
}  // namespace lmcache::gpu
