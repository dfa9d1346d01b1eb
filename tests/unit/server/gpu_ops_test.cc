// GpuOps, in process over the emulated backend: a registration of vLLM's
// tensors (tests/fakes/vllm_kv_cache.h; each wrapper in the msgpack map form,
// which the decoder reads alike; the pickles clients send are covered by
// device_ipc_wrapper_test and the Python end-to-end tests), stores and
// retrieves with their leases pinned past both TTLs (fake clock), failures
// answered with a real event, PyTorch's refcounters given back, and the
// transfer modes as registered things.
#include "server/gpu_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "fakes/wait_until.h"
#include "fakes/prefault_gate.h"
#include "fakes/service_harness.h"
#include "fakes/vllm_kv_cache.h"
#include "gpu/emulated_backend.h"
#include "protocol/gpu_messages.h"
#include "shm/shm_segment.h"

namespace lmcache::server {
namespace {

namespace fake = lmcache::testing;
using fake::KeyArgs;
using fake::ServiceHarness;

constexpr std::int64_t kChunk = 32;  // two blocks of 16
constexpr std::uint64_t kRefFileBytes = 64 + 8 * 10000;

std::string Unique(const char* what) {
  static std::atomic<int> n{0};
  return std::string("lmc_gpuops_test_") + what + "_" + std::to_string(getpid()) + "_" + std::to_string(n++);
}

std::unique_ptr<shm::ShmSegment> Segment(const std::string& name, std::uint64_t bytes) {
  shm::CreateOptions o;
  o.name = name;
  o.size_bytes = bytes;
  return std::move(shm::ShmSegment::Create(o)).value();
}

using testing::WaitUntil;

std::int64_t& Slot(const shm::ShmSegment& s, std::uint64_t i) {
  return *reinterpret_cast<std::int64_t*>(s.base() + 64 + 8 * i);
}

// One emulated vLLM worker: its KV group's allocation, its events, its refcounters.
struct Worker {
  explicit Worker(fake::Layout layout = fake::Layout::kSharedLbhnc) {
    fake::Geometry g;
    g.layers = 2;
    g.blocks = 16;
    g.block_size = 16;
    cache = fake::MakeCache(layout, g, gpu::EmulatedMemoryHandle(memory_name));
    memory = Segment(memory_name, cache.allocation_bytes);
    events = Segment(events_name, 4096);
    refcounters = Segment(ref_name, kRefFileBytes);
    *reinterpret_cast<int*>(refcounters->base()) = 1;  // the sender's own map
  }

  // kv_cache as the map form of custom_types.py: one ext 1 per layer.
  std::string KvCacheFrame() {
    msgpk::Encoder e;
    e.Array(static_cast<std::uint32_t>(cache.layers.size()));
    for (const protocol::DeviceIpcWrapper& w : cache.layers) {
      Slot(*refcounters, shares) = 1;
      const std::string shareable = std::string("\x02", 1) + "c" +
                                    std::string(reinterpret_cast<const char*>(w.mem_handle.data()), 64);
      msgpk::Encoder body;
      body.Map(9).Str("magic").Str("lmcache.cuda_ipc_wrapper").Str("version").Int(1);
      body.Str("kind").Str("cuda").Str("handle").Array(8).Int(0).Bin(shareable);
      body.Int(static_cast<std::int64_t>(w.storage_bytes)).Int(static_cast<std::int64_t>(w.storage_byte_offset));
      body.Bin("/" + ref_name).Int(shares++).Bin(std::string(64, '\0')).Bool(false);
      body.Str("dtype").Str("torch." + w.dtype).Str("shape").Array(static_cast<std::uint32_t>(w.shape.size()));
      for (const std::int64_t d : w.shape) body.Int(d);
      body.Str("stride").Array(static_cast<std::uint32_t>(w.stride.size()));
      for (const std::int64_t d : w.stride) body.Int(d);
      body.Str("storage_offset").Int(w.storage_offset).Str("device_uuid").Str(w.device_uuid);
      e.Ext(1, body.Take());
    }
    return e.Take();
  }

  std::vector<std::string> RegisterFrames(std::int64_t id, const std::string& model = "model") {
    instance = id;
    return {fake::IntFrame(id), KvCacheFrame(), fake::StrFrame(model), fake::IntFrame(1), fake::StrFrame("vllm"),
            msgpk::Encoder().Map(1).Str("kv_layout").Str(fake::Hint(cache.layout)).Take(),
            msgpk::Encoder().Array(0).Take()};
  }

  gpu::EventHandle Event(std::uint64_t word) { return gpu::EmulatedEventHandle(events_name, word * 8, 1); }
  void Record(std::uint64_t word) {
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(events->base() + word * 8))
        .store(1, std::memory_order_release);
  }
  std::string EventFrame(std::uint64_t word) {
    const gpu::EventHandle h = Event(word);
    return msgpk::Encoder().Bin(std::string_view(reinterpret_cast<const char*>(h.data()), h.size())).Take();
  }
  std::vector<std::string> Transfer(const KeyArgs& key, std::vector<std::int32_t> ids, std::uint64_t word) {
    msgpk::Encoder e;
    e.Array(1).Array(static_cast<std::uint32_t>(ids.size()));
    for (const std::int32_t id : ids) e.Int(id);
    return {fake::KeyFrame(key), fake::IntFrame(instance), e.Take(), EventFrame(word)};
  }
  std::byte Byte(std::int64_t layer, std::int64_t kv, std::int64_t block, std::int64_t token) const {
    return memory->base()[cache.ElementByte(layer, kv, block, token, 1, 3)];
  }
  void Fill(std::uint8_t seed) {
    for (std::uint64_t i = 0; i < memory->size(); ++i) memory->base()[i] = std::byte((i * 31 + seed) & 0xff);
  }

  std::string memory_name = Unique("kv");
  std::string events_name = Unique("ev");
  std::string ref_name = "torch_" + Unique("ref");
  fake::Cache cache;
  std::unique_ptr<shm::ShmSegment> memory, events, refcounters;
  std::int64_t instance = 0;
  int shares = 0;
};

ServiceConfig Config(const std::string& modes = "auto") {
  ServiceConfig c;
  c.chunk_sizes = store::ChunkSizes(kChunk);
  c.gpu_backend = "emulated";
  c.gpu_event_timeout_ms = 3000;
  c.transfer_mode = modes;
  return c;
}

// The server event of a store/retrieve reply ([bin(64), bool]).
std::pair<gpu::EventHandle, bool> EventReply(const std::string& value) {
  const msgpack::object_handle h = std::move(msgpk::Parse(value, "reply")).value();
  const msgpack::object& o = h.get();
  gpu::EventHandle event{};
  EXPECT_EQ(o.via.array.size, 2u);
  EXPECT_EQ(o.via.array.ptr[0].via.bin.size, 64u);
  std::memcpy(event.data(), o.via.array.ptr[0].via.bin.ptr, std::min<std::size_t>(64, o.via.array.ptr[0].via.bin.size));
  return {event, o.via.array.ptr[1].via.boolean};
}

// Waits for an emulated server event: true when it completed, false when it failed.
bool WaitEvent(const gpu::EventHandle& h) {
  std::uint64_t offset = 0;
  std::uint64_t value = 0;
  std::memcpy(&offset, h.data() + 8, 8);
  std::memcpy(&value, h.data() + 16, 8);
  auto segment = std::move(shm::ShmSegment::Attach(reinterpret_cast<const char*>(h.data() + 24), 0)).value();
  std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(segment->base() + offset));
  std::uint64_t w = 0;
  if (!WaitUntil([&] {
        w = word.load(std::memory_order_acquire);
        return (w & gpu::kEventFailedBit) != 0 || w >= value;
      })) {
    ADD_FAILURE() << "the server's event did not complete";
    return false;
  }
  return (w & gpu::kEventFailedBit) == 0;
}

std::int64_t Lookup(ServiceHarness& h, KeyArgs key, const std::string& request) {
  key.worker_id.reset();
  key.request_id = request;
  EXPECT_TRUE(h.Call("lookup", {fake::KeyFrame(key), fake::IntFrame(1)}).status.ok());
  return h.Ok("query_prefetch_status", {fake::StrFrame(request)}).get().as<std::int64_t>();
}

KeyArgs Prompt(std::size_t chunks = 2) {
  KeyArgs k;
  k.tokens = fake::Tokens(chunks * kChunk, 5);
  k.end = static_cast<std::int64_t>(chunks * kChunk);
  return k;
}

TEST(GpuOpsTest, AStoredPromptIsRetrievedIntoAnotherWorkersBlocks) {
  ServiceHarness h(64ull << 20, Config());
  Worker a, b;
  a.Fill(1);
  ASSERT_TRUE(h.CallAs("a", "register_kv_cache", a.RegisterFrames(11)).status.ok());
  ASSERT_TRUE(h.CallAs("b", "register_kv_cache", b.RegisterFrames(12)).status.ok());
  const KeyArgs key = Prompt();
  a.Record(0);
  const Reply stored = h.CallAs("a", "store", a.Transfer(key, {3, 1, 7, 9}, 0));
  ASSERT_TRUE(stored.status.ok()) << stored.status.ToString();
  ASSERT_TRUE(WaitEvent(EventReply(stored.value).first));
  ASSERT_EQ(Lookup(h, key, "r"), 2);
  b.Record(0);
  KeyArgs retrieve = key;
  retrieve.request_id = "r";
  std::vector<std::string> frames = b.Transfer(retrieve, {2, 4, 6, 8}, 0);
  frames.push_back(fake::IntFrame(0));
  const Reply got = h.CallAs("b", "retrieve", frames);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  ASSERT_TRUE(WaitEvent(EventReply(got.value).first));
  const std::vector<std::pair<int, int>> moved = {{3, 2}, {1, 4}, {7, 6}, {9, 8}};
  for (std::int64_t l = 0; l < 2; ++l) {
    for (const auto& [from, to] : moved) {
      for (std::int64_t t = 0; t < 16; ++t) {
        ASSERT_EQ(b.Byte(l, 1, to, t), a.Byte(l, 1, from, t)) << "layer " << l << " block " << from;
      }
    }
  }
  EXPECT_TRUE(h.Call("end_session", {fake::StrFrame("r")}).status.ok());
}

TEST(GpuOpsTest, ADeviceCopysLeasesArePinnedPastBothTtls) {
  ServiceHarness h(64ull << 20, Config());
  store::ObjectTable& table = h.l1().table();
  Worker a;
  a.Fill(2);
  ASSERT_TRUE(h.CallAs("a", "register_kv_cache", a.RegisterFrames(21)).status.ok());
  const KeyArgs key = Prompt();
  const Reply stored = h.CallAs("a", "store", a.Transfer(key, {1, 2, 3, 4}, 0));
  ASSERT_TRUE(stored.status.ok()) << stored.status.ToString();
  // The engine is slow: both TTLs pass and the table reclaims what expired.
  h.clock().Advance(table.config().write_ttl_ms + table.config().read_ttl_ms + 1);
  table.ReclaimExpired();
  EXPECT_EQ(table.Stats().staging_objects, 2u) << "a copy in flight lost its objects";
  a.Record(0);
  ASSERT_TRUE(WaitEvent(EventReply(stored.value).first));
  ASSERT_EQ(Lookup(h, key, "r"), 2);

  Worker b;
  ASSERT_TRUE(h.CallAs("b", "register_kv_cache", b.RegisterFrames(22)).status.ok());
  KeyArgs retrieve = key;
  retrieve.request_id = "r";
  std::vector<std::string> frames = b.Transfer(retrieve, {5, 6, 7, 8}, 1);
  frames.push_back(fake::IntFrame(0));
  const Reply got = h.CallAs("b", "retrieve", frames);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  h.clock().Advance(table.config().read_ttl_ms + 1);
  table.ReclaimExpired();
  table.EvictLru(~std::uint64_t{0});  // eviction pressure: an expired lease would let them go
  EXPECT_EQ(table.Stats().resident_objects, 2u) << "objects under a scatter were evicted";
  b.Record(1);
  ASSERT_TRUE(WaitEvent(EventReply(got.value).first));
  EXPECT_EQ(b.Byte(0, 0, 5, 3), a.Byte(0, 0, 1, 3));
  EXPECT_EQ(b.Byte(1, 1, 8, 15), a.Byte(1, 1, 4, 15));
  EXPECT_TRUE(h.Call("end_session", {fake::StrFrame("r")}).status.ok());
}

// Issue 20, "the engine's event never fires": the transfer fails at
// --gpu-event-timeout-ms, its server event says so, everything it held is
// let go, and nothing lands later when the engine's event does complete (a
// store publishes nothing; a retrieve never writes the worker's blocks).
TEST(GpuOpsTest, AnEngineEventThatNeverFiresFailsTheTransferAndNothingLandsLater) {
  ServiceConfig config = Config();
  config.gpu_event_timeout_ms = 100;
  ServiceHarness h(64ull << 20, config);
  store::ObjectTable& table = h.l1().table();
  Worker a;
  a.Fill(4);
  ASSERT_TRUE(h.CallAs("a", "register_kv_cache", a.RegisterFrames(31)).status.ok());
  const KeyArgs key = Prompt();
  const Reply stuck = h.CallAs("a", "store", a.Transfer(key, {1, 2, 3, 4}, 0));  // event 0 never recorded
  ASSERT_TRUE(stuck.status.ok()) << stuck.status.ToString();
  EXPECT_FALSE(WaitEvent(EventReply(stuck.value).first)) << "the server's event must fail";
  EXPECT_EQ(table.Stats().staging_objects, 0u);
  EXPECT_EQ(table.Stats().write_leases, 0u);
  EXPECT_EQ(h.l1().allocator().UsedBytes(), 0u);
  a.Record(0);  // the engine finishes its step after all
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(Lookup(h, key, "none"), 0) << "a failed store published its objects";
  EXPECT_TRUE(h.Call("end_session", {fake::StrFrame("none")}).status.ok());

  // A stored prompt, retrieved into a worker whose engine never signals.
  const Reply stored = h.CallAs("a", "store", a.Transfer(key, {1, 2, 3, 4}, 1));
  a.Record(1);
  ASSERT_TRUE(WaitEvent(EventReply(stored.value).first));
  ASSERT_EQ(Lookup(h, key, "r"), 2);
  Worker b;
  b.Fill(9);
  const std::vector<std::byte> before(b.memory->base(), b.memory->base() + b.memory->size());
  ASSERT_TRUE(h.CallAs("b", "register_kv_cache", b.RegisterFrames(32)).status.ok());
  KeyArgs retrieve = key;
  retrieve.request_id = "r";
  std::vector<std::string> frames = b.Transfer(retrieve, {5, 6, 7, 8}, 0);
  frames.push_back(fake::IntFrame(0));
  const Reply got = h.CallAs("b", "retrieve", frames);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_FALSE(WaitEvent(EventReply(got.value).first));
  b.Record(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(std::equal(before.begin(), before.end(), b.memory->base()))
      << "a failed retrieve wrote the worker's blocks";
  EXPECT_TRUE(h.Call("end_session", {fake::StrFrame("r")}).status.ok());
  EXPECT_EQ(table.Stats().locked_objects, 0u);
  EXPECT_EQ(table.Stats().read_leases, 0u);
}

TEST(GpuOpsTest, AFailedTransferOfARegisteredWorkerAnswersARealCompletedEvent) {
  ServiceHarness h(64ull << 20, Config());
  Worker a;
  ASSERT_TRUE(h.CallAs("a", "register_kv_cache", a.RegisterFrames(31)).status.ok());
  const Reply short_list = h.CallAs("a", "store", a.Transfer(Prompt(), {1, 2, 3}, 0));
  EXPECT_EQ(short_list.status.code(), ErrorCode::kInvalidArgument);
  const auto [event, ok] = EventReply(short_list.value);
  EXPECT_FALSE(ok);
  EXPECT_EQ(std::memcmp(event.data(), "LMCEMUE", 7), 0) << "b\"\" would make a reference client raise";
  EXPECT_FALSE(WaitEvent(event)) << "complete, and marked failed";
  Worker stranger;
  stranger.instance = 99;
  const Reply unknown = h.CallAs("x", "store", stranger.Transfer(Prompt(), {1, 2, 3, 4}, 0));
  EXPECT_EQ(unknown.status.code(), ErrorCode::kNotRegistered);
  EXPECT_EQ(unknown.value, msgpk::Encoder().Array(2).Bin("").Bool(false).Take()) << "no context: no event to give";
}

TEST(GpuOpsTest, PytorchsIpcReferencesGoBackWhenTheContextClosesOrNoneOpens) {
  ServiceHarness h(64ull << 20, Config());
  Worker a;
  ASSERT_TRUE(h.CallAs("a", "register_kv_cache", a.RegisterFrames(41)).status.ok());
  EXPECT_EQ(Slot(*a.refcounters, 0), 1) << "held while registered";
  ASSERT_TRUE(h.CallAs("a", "unregister_kv_cache", {fake::IntFrame(41)}).status.ok());
  WaitUntil([&] { return Slot(*a.refcounters, 1) == 0; });
  EXPECT_EQ(Slot(*a.refcounters, 0), 0);
  EXPECT_EQ(Slot(*a.refcounters, 1), 0);
  EXPECT_EQ(*reinterpret_cast<int*>(a.refcounters->base()), 1) << "the sender's own map count";
  // A registration refused before any context opens gives its references back at once.
  std::vector<std::string> frames = a.RegisterFrames(42, "other");
  frames[3] = fake::IntFrame(0);  // world size 0
  EXPECT_FALSE(h.CallAs("a", "register_kv_cache", frames).status.ok());
  EXPECT_EQ(Slot(*a.refcounters, 2), 0);
  EXPECT_EQ(Slot(*a.refcounters, 3), 0);
}

TEST(GpuOpsTest, TransferModesServeWhatTheFlagSaysAndAnnounceIt) {
  auto features = [](ServiceHarness& h) {
    const msgpack::object_handle info = h.Ok("server_info", {});
    std::vector<std::string> out;
    const msgpack::object& f = fake::Field(info.get(), "features");
    for (std::uint32_t i = 0; i < f.via.array.size; ++i) out.push_back(f.via.array.ptr[i].as<std::string>());
    return out;
  };
  ServiceHarness all(64ull << 20, Config("auto"));
  EXPECT_EQ(features(all), (std::vector<std::string>{"shm", "engine_driven", "lmcache_driven", "cuda_ipc"}));
  ServiceHarness shm(64ull << 20, Config("engine_driven"));
  EXPECT_EQ(features(shm), (std::vector<std::string>{"shm", "engine_driven"}));
  Worker a;
  const Reply refused = shm.CallAs("a", "register_kv_cache", a.RegisterFrames(51));
  EXPECT_EQ(refused.status.code(), ErrorCode::kNotSupported);
  EXPECT_NE(refused.status.message().find("--supported-transfer-mode"), std::string::npos);
  EXPECT_EQ(Slot(*a.refcounters, 0), 1) << "never decoded: nothing to give back";
  ServiceHarness gpu(64ull << 20, Config("lmcache_driven"));
  const Reply engine = gpu.Call("register_kv_cache_engine_driven_context", {fake::RegisterFrame(52)});
  EXPECT_EQ(engine.status.code(), ErrorCode::kNotSupported);
  // No GPU client: no backend, no contexts, no closer thread.
  const StatsSnapshot s = all.service().Snapshot();
  EXPECT_EQ(s.gpu.contexts + s.gpu.mapped_allocations, 0u);
}


// A store on a pool still being pre-faulted parks until pages are ready
// (issue 20), then copies as any other: the engine's blocks land in L1.
TEST(GpuOpsTest, AStoreThatMustWaitForPagesParksAndCopiesOnceTheyCome) {
  fake::PrefaultGate gate(0);  // nothing ready yet; opened below, before h goes
  ServiceHarness h(64ull << 20, Config(), true, nullptr, nullptr,
                   [&gate](store::L1Config& l1) { gate.Hold(l1, 4ull << 20); });
  Worker a;
  a.Fill(3);
  ASSERT_TRUE(h.CallAs("a", "register_kv_cache", a.RegisterFrames(11)).status.ok());
  const KeyArgs key = Prompt();
  a.Record(0);
  auto stored = std::async(std::launch::async, [&] { return h.CallAs("a", "store", a.Transfer(key, {3, 1, 7, 9}, 0)); });
  WaitUntil([&] { return h.service().state().parked().size() != 0; });
  ASSERT_EQ(h.service().state().parked().size(), 1u) << "the store held its thread instead of parking";
  EXPECT_EQ(h.service().table().Stats().staging_objects, 0u);
  gate.Open();
  const Reply reply = stored.get();
  ASSERT_TRUE(reply.status.ok()) << reply.status.ToString();
  ASSERT_TRUE(WaitEvent(EventReply(reply.value).first));
  EXPECT_EQ(Lookup(h, key, "r"), 2);
  EXPECT_TRUE(h.Call("end_session", {fake::StrFrame("r")}).status.ok());
  EXPECT_EQ(h.service().state().parked().Stats().by_operation.at("store").ended[0], 1u);  // woken
}

}  // namespace
}  // namespace lmcache::server
