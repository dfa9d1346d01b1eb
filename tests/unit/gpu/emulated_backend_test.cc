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

#include "gpu/host_kv_copy.h"
#include "shm/shm_segment.h"

namespace lmcache::gpu {
namespace {

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

class EmulatedBackendTest : public testing::Test {
 protected:
  void SetUp() override {
    memory_name_ = Name("kv");
    events_name_ = Name("ev");
    layer_bytes_ = 2 * 8 * 16 * 2 * 32 * 2;  // [2, 8 blocks, 16 tokens, 2 heads, 32] bf16
    memory_ = Segment(memory_name_, 2 * layer_bytes_);
    events_ = Segment(events_name_, 4096);
    for (std::uint64_t i = 0; i < memory_->size(); ++i) memory_->base()[i] = std::byte(i * 13 % 251);
    for (int l = 0; l < 2; ++l) {
      protocol::DeviceIpcWrapper t;
      t.kind = protocol::IpcWrapperKind::kRawCuda;
      t.dtype = "bfloat16";
      t.element_size = 2;
      t.shape = {2, 8, 16, 2, 32};
      t.stride = {8 * 16 * 2 * 32, 16 * 2 * 32, 2 * 32, 32, 1};
      t.device_uuid = "emulated";
      t.mem_handle = EmulatedMemoryHandle(memory_name_);
      t.storage_byte_offset = l * layer_bytes_;
      t.storage_bytes = layer_bytes_;
      layers_.push_back(t);
    }
    layout_ = *DetectKvLayout(layers_, {});
    backend_ = MakeEmulatedBackend(BackendOptions{std::chrono::milliseconds(300)});
  }

  std::vector<ChunkTransfer> OneChunk(std::byte* object) const {
    ChunkTransfer c;
    c.block_ids = {3, 1};
    c.tokens = kChunk;
    c.object = object;
    return {c};
  }

  std::string memory_name_, events_name_;
  std::uint64_t layer_bytes_ = 0;
  std::unique_ptr<shm::ShmSegment> memory_, events_;
  std::vector<protocol::DeviceIpcWrapper> layers_;
  KvLayout layout_;
  std::unique_ptr<KvBackend> backend_;
};

TEST_F(EmulatedBackendTest, AStoreWaitsForTheEngineEventThenCopiesAndCompletesItsEvent) {
  auto context = backend_->Open(layout_, kChunk, {});
  ASSERT_TRUE(context.ok()) << context.status().ToString();
  std::vector<std::byte> object(layout_.ObjectBytes(kChunk));
  std::atomic<int> done{0};
  Status seen = Internal("not called");
  auto event = (*context)->Enqueue(Direction::kStore, EmulatedEventHandle(events_name_, 8, 5),
                                   OneChunk(object.data()), [&](const Status& s) {
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
  std::vector<std::byte> expected(object.size());
  const std::vector<std::int32_t> ids = {3, 1};
  std::vector<std::byte*> bases = {memory_->base(), memory_->base() + layer_bytes_};
  HostGather({layout_.geometry, layout_.Object(kChunk), ids.data(), kChunk, 0}, bases, expected.data());
  EXPECT_EQ(object, expected);
}

TEST_F(EmulatedBackendTest, AnEventThatNeverCompletesFailsTheTransferAndItsServerEvent) {
  auto context = backend_->Open(layout_, kChunk, {});
  ASSERT_TRUE(context.ok());
  std::vector<std::byte> object(layout_.ObjectBytes(kChunk), std::byte{0x5a});
  Status seen;
  auto event = (*context)->Enqueue(Direction::kRetrieve, EmulatedEventHandle(events_name_, 16, 1),
                                   OneChunk(object.data()), [&](const Status& s) { seen = s; });
  ASSERT_TRUE(event.ok());
  const ServerWord server = Open(*event);
  ASSERT_TRUE((*context)->Drain(std::chrono::seconds(5)));
  EXPECT_EQ(seen.code(), ErrorCode::kTimeout) << seen.ToString();
  EXPECT_EQ(server.Load(), server.value | kEventFailedBit);
  EXPECT_EQ(memory_->base()[3 * 16 * 2 * 32 * 2], std::byte(3 * 16 * 2 * 32 * 2 * 13 % 251))
      << "a failed retrieve wrote the cache";
}

TEST_F(EmulatedBackendTest, MappingsAreSharedPerAllocationAndClosedWithTheLastContext) {
  {
    auto a = backend_->Open(layout_, kChunk, {});
    auto b = backend_->Open(layout_, kChunk, {});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(backend_->Stats().mapped_allocations, 1u);
    a->reset();
    EXPECT_EQ(backend_->Stats().mapped_allocations, 1u);
  }
  EXPECT_EQ(backend_->Stats().mapped_allocations, 0u);
}

TEST_F(EmulatedBackendTest, RefusesHandlesItCannotMapOrTensorsPastTheirAllocation) {
  KvLayout foreign = layout_;
  foreign.layers[0].mem_handle.fill(7);  // a real cudaIpcMemHandle_t, say
  EXPECT_EQ(backend_->Open(foreign, kChunk, {}).status().code(), ErrorCode::kInvalidArgument);
  KvLayout gone = layout_;
  gone.layers[1].mem_handle = EmulatedMemoryHandle(Name("missing"));
  EXPECT_EQ(backend_->Open(gone, kChunk, {}).status().code(), ErrorCode::kInvalidArgument);
  KvLayout pool = layout_;
  pool.layers[0].mem_handle = EmulatedMemoryHandle("lmcache_l1_pool_1234");
  EXPECT_EQ(backend_->Open(pool, kChunk, {}).status().code(), ErrorCode::kPermissionDenied);
  KvLayout past = layout_;
  past.layers[1].storage_byte_offset = layer_bytes_ + 64;
  EXPECT_NE(backend_->Open(past, kChunk, {}).status().message().find("reaches byte"), std::string::npos);
  EXPECT_EQ(backend_->Stats().mapped_allocations, 0u);
}

}  // namespace
}  // namespace lmcache::gpu
