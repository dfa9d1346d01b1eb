// The CUDA gather/scatter kernels (csrc/kv_copy.cu) against the host
// emulation (HostGather/HostScatter: kv_index.h's math on the CPU), byte for
// byte, on the tensors vLLM allocates (tests/fakes/vllm_kv_cache.h) and the
// copies the server plans for them (DetectKvLayout, PlanStore, PlanRetrieve,
// one kv::ChunkCopy per group part as cuda_backend.cc builds it): every
// format the server accepts, element sizes 1, 2 and 4, the head sizes of
// the GPU kit (tools/gpu_kit/README.md), skip_first_n_tokens, several KV
// groups (one of them a sliding window), and objects in device memory and in
// pinned host memory mapped for the device (the backend's staging is the
// first; the second is what a kernel reading L1 directly would see).
//
// Built only with the CUDA toolkit; without a visible device every case
// skips with "no CUDA device visible" (the GPU kit runs it on one).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fakes/vllm_kv_cache.h"
#include "gpu/host_kv_copy.h"
#include "gpu/kv_layout.h"
#include "gpu/transfer_plan.h"
#include "kv_copy.h"

namespace lmcache::gpu {
namespace {

using testing::Cache;
using testing::Layout;

// Empty when a device is visible, else why not (the skip says it).
std::string NoDevice() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device visible (") + cudaGetErrorName(e) + ")";
  return n > 0 ? "" : "no CUDA device visible";
}

std::string CudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// Device memory, or pinned host memory mapped for the device; freed with the value.
class DeviceBytes {
 public:
  DeviceBytes(std::size_t bytes, bool pinned_host) : bytes_(bytes), pinned_(pinned_host) {
    const cudaError_t e = pinned_ ? cudaHostAlloc(&host_, bytes, cudaHostAllocMapped)
                                  : cudaMalloc(&device_, bytes);
    if (e != cudaSuccess) {
      error_ = CudaText(e);
    } else if (pinned_) {
      const cudaError_t m = cudaHostGetDevicePointer(&device_, host_, 0);
      if (m != cudaSuccess) error_ = CudaText(m);
    }
  }
  ~DeviceBytes() {
    if (pinned_ && host_ != nullptr) cudaFreeHost(host_);
    if (!pinned_ && device_ != nullptr) cudaFree(device_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  const std::string& error() const { return error_; }
  std::uint8_t* device() const { return static_cast<std::uint8_t*>(device_); }
  std::string Upload(const std::vector<std::byte>& from) {
    // Default: the runtime tells device from mapped host memory (unified addressing).
    return CudaText(cudaMemcpy(device_, from.data(), std::min(bytes_, from.size()), cudaMemcpyDefault));
  }
  std::vector<std::byte> Download() const {
    std::vector<std::byte> out(bytes_);
    if (cudaMemcpy(out.data(), device_, bytes_, cudaMemcpyDefault) != cudaSuccess) out.clear();
    return out;
  }

 private:
  std::size_t bytes_;
  bool pinned_;
  void* host_ = nullptr;
  void* device_ = nullptr;
  std::string error_;
};

// Where two byte strings first differ, or -1.
std::int64_t FirstDifference(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  if (a.size() != b.size()) return 0;
  if (std::memcmp(a.data(), b.data(), a.size()) == 0) return -1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<std::int64_t>(i);
  }
  return -1;
}

std::vector<std::byte> Random(std::size_t bytes, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(bytes);
  for (std::size_t i = 0; i < bytes; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, bytes - i));
  }
  return out;
}

// `count` distinct block ids of a cache of `blocks`, never the null block 0.
std::vector<std::int32_t> BlockIds(std::int64_t blocks, std::size_t count, std::uint32_t seed) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(blocks - 1));
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  ids.resize(count);
  return ids;
}

struct Case {
  Layout layout;
  std::uint32_t element_size;
  std::int64_t head_size;  // MLA: the latent width
  std::int64_t heads;
  bool two_groups = false;     // a second, sliding-window group of the same format
  bool pinned_object = false;  // objects in mapped pinned host memory
};

constexpr std::int64_t kBlockSize = 16;
constexpr std::int64_t kChunk = 32;  // two blocks
constexpr std::int64_t kChunks = 3;
constexpr std::int64_t kBlocks = 24;

class CudaKvCopyTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    testing::Geometry g;
    g.layers = 3;
    g.blocks = kBlocks;
    g.block_size = kBlockSize;
    g.heads = c.heads;
    g.head_size = c.head_size;
    g.element_size = c.element_size;
    g.dtype = c.element_size == 1 ? "uint8" : c.element_size == 2 ? "bfloat16" : "float32";
    g.pad = 3;
    g.storage_byte_offset = 512;
    protocol::MemHandle handle{};
    caches_.push_back(testing::MakeCache(c.layout, g, handle));
    std::vector<protocol::EngineGroupInfo> infos;
    if (c.two_groups) {
      handle[0] = 1;
      caches_.push_back(testing::MakeCache(c.layout, g, handle));
      for (std::size_t n = 0; n < caches_.size(); ++n) {
        protocol::EngineGroupInfo info;
        info.engine_group_id = static_cast<std::int64_t>(n);
        for (std::int64_t l = 0; l < g.layers; ++l) info.layer_indices.push_back(static_cast<std::int64_t>(n) * g.layers + l);
        info.tokens_per_block = kBlockSize;
        info.sw_size_tokens = n == 1 ? kBlockSize : -1;  // a window shorter than a chunk
        infos.push_back(info);
      }
    }
    std::vector<const Cache*> caches;
    for (const Cache& cache : caches_) caches.push_back(&cache);
    auto layout = DetectKvLayout(testing::Registration(caches, infos), kChunk);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    layout_ = *layout;
    ASSERT_EQ(layout_.groups.size(), caches_.size());
    // Everything above (the registration and its layout) is checked
    // everywhere; the copies need a GPU.
    if (const std::string why = NoDevice(); !why.empty()) GTEST_SKIP() << why << " (the GPU kit runs this on one)";
  }

  // Each group's allocation, as bytes on both sides.
  struct Allocations {
    std::vector<std::vector<std::byte>> host;
    std::vector<std::unique_ptr<DeviceBytes>> device;
  };
  void Allocate(Allocations* a, std::uint32_t seed) {
    for (std::size_t n = 0; n < caches_.size(); ++n) {
      a->host.push_back(Random(caches_[n].allocation_bytes, seed + static_cast<std::uint32_t>(n)));
      a->device.push_back(std::make_unique<DeviceBytes>(caches_[n].allocation_bytes, false));
      ASSERT_TRUE(a->device.back()->error().empty()) << a->device.back()->error();
      ASSERT_EQ(a->device.back()->Upload(a->host.back()), CudaText(cudaSuccess));
    }
  }
  // A group's layer bases: host pointers, and device addresses in device memory.
  std::vector<std::byte*> HostBases(Allocations& a, std::size_t group) const {
    std::vector<std::byte*> out;
    for (const LayerRef& l : layout_.groups[group].layers) out.push_back(a.host[group].data() + l.first_byte);
    return out;
  }
  std::unique_ptr<DeviceBytes> DeviceBases(const Allocations& a, std::size_t group) const {
    std::vector<std::uint64_t> bases;
    for (const LayerRef& l : layout_.groups[group].layers) {
      bases.push_back(reinterpret_cast<std::uint64_t>(a.device[group]->device() + l.first_byte));
    }
    auto out = std::make_unique<DeviceBytes>(bases.size() * 8, false);
    std::vector<std::byte> bytes(bases.size() * 8);
    std::memcpy(bytes.data(), bases.data(), bytes.size());
    (void)out->Upload(bytes);
    return out;
  }
  static std::unique_ptr<DeviceBytes> DeviceIds(const std::vector<std::int32_t>& ids) {
    auto out = std::make_unique<DeviceBytes>(std::max<std::size_t>(ids.size() * 4, 4), false);
    std::vector<std::byte> bytes(ids.size() * 4);
    std::memcpy(bytes.data(), ids.data(), bytes.size());
    if (!bytes.empty()) (void)out->Upload(bytes);
    return out;
  }
  protocol::GroupBlockIds Ids(std::uint32_t seed) const {
    protocol::GroupBlockIds ids;
    for (std::size_t n = 0; n < caches_.size(); ++n) {
      ids.push_back(BlockIds(kBlocks, kChunks * kChunk / kBlockSize, seed + static_cast<std::uint32_t>(n)));
    }
    return ids;
  }

  // Runs one chunk's group parts on the GPU (gather or scatter) into/out of `object`.
  void RunOnDevice(bool gather, const ChunkPlan& plan, const Allocations& a, std::uint8_t* object) {
    for (const GroupCopy& part : plan.groups) {
      const KvGroupLayout& g = layout_.groups[part.group];
      auto ids = DeviceIds(part.block_ids);
      auto bases = DeviceBases(a, part.group);
      const kv::ChunkCopy copy{g.paged, g.object(), reinterpret_cast<const std::int32_t*>(ids->device()),
                               g.slots, part.skip_tokens};
      const int e = gather ? kv::LaunchGather(copy, reinterpret_cast<const std::uint64_t*>(bases->device()),
                                              object + g.object_offset, nullptr, {nullptr, 0})
                           : kv::LaunchScatter(copy, reinterpret_cast<const std::uint64_t*>(bases->device()),
                                               object + g.object_offset, nullptr, {nullptr, 0});
      ASSERT_EQ(e, 0) << CudaText(static_cast<cudaError_t>(e));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << CudaText(cudaGetLastError());
    }
  }
  void RunOnHost(bool gather, const ChunkPlan& plan, Allocations& a, std::byte* object) {
    for (const GroupCopy& part : plan.groups) {
      const KvGroupLayout& g = layout_.groups[part.group];
      const kv::ChunkCopy copy{g.paged, g.object(), part.block_ids.data(), g.slots, part.skip_tokens};
      const std::vector<std::byte*> bases = HostBases(a, part.group);
      if (gather) {
        HostGather(copy, bases, object + g.object_offset);
      } else {
        HostScatter(copy, bases, object + g.object_offset);
      }
    }
  }

  std::vector<Cache> caches_;
  KvLayout layout_;
};

TEST_P(CudaKvCopyTest, GatherMatchesTheHostByteForByte) {
  Allocations a;
  ASSERT_NO_FATAL_FAILURE(Allocate(&a, 7));
  const protocol::GroupBlockIds ids = Ids(11);
  ASSERT_TRUE(CheckBlockIds(layout_, kChunks, ids).ok());
  const std::vector<ChunkPlan> plans = PlanStore(layout_, ids, kChunks);
  ASSERT_EQ(plans.size(), static_cast<std::size_t>(kChunks));
  for (const ChunkPlan& plan : plans) {
    DeviceBytes object(layout_.object_bytes, GetParam().pinned_object);
    ASSERT_TRUE(object.error().empty()) << object.error();
    ASSERT_EQ(object.Upload(std::vector<std::byte>(layout_.object_bytes, std::byte{0xee})), CudaText(cudaSuccess));
    ASSERT_NO_FATAL_FAILURE(RunOnDevice(true, plan, a, object.device()));
    std::vector<std::byte> expected(layout_.object_bytes, std::byte{0xee});
    RunOnHost(true, plan, a, expected.data());
    const std::vector<std::byte> got = object.Download();
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(FirstDifference(got, expected), -1) << "chunk " << plan.chunk << " of " << got.size() << " bytes";
  }
}

TEST_P(CudaKvCopyTest, ScatterIntoOtherBlocksWithSkippedTokensMatchesTheHost) {
  Allocations a;
  ASSERT_NO_FATAL_FAILURE(Allocate(&a, 21));
  const protocol::GroupBlockIds ids = Ids(31);
  // The first 20 tokens are the engine's own (APC): one whole block is left alone.
  const std::vector<ChunkPlan> plans = PlanRetrieve(layout_, ids, kChunks, /*skip_tokens=*/20);
  ASSERT_EQ(plans.size(), static_cast<std::size_t>(kChunks));
  for (const ChunkPlan& plan : plans) {
    const std::vector<std::byte> source = Random(layout_.object_bytes, 100 + static_cast<std::uint32_t>(plan.chunk));
    DeviceBytes object(layout_.object_bytes, GetParam().pinned_object);
    ASSERT_TRUE(object.error().empty()) << object.error();
    ASSERT_EQ(object.Upload(source), CudaText(cudaSuccess));
    ASSERT_NO_FATAL_FAILURE(RunOnDevice(false, plan, a, object.device()));
    std::vector<std::byte> host_source = source;
    RunOnHost(false, plan, a, host_source.data());
  }
  for (std::size_t n = 0; n < caches_.size(); ++n) {
    const std::vector<std::byte> got = a.device[n]->Download();
    ASSERT_EQ(got.size(), a.host[n].size());
    EXPECT_EQ(FirstDifference(got, a.host[n]), -1) << "group " << n << " of " << got.size() << " bytes";
  }
}

// A cancelled copy (its ticket in the cancellation word) copies nothing.
TEST_P(CudaKvCopyTest, ACancelledCopyTouchesNothing) {
  Allocations a;
  ASSERT_NO_FATAL_FAILURE(Allocate(&a, 41));
  const std::vector<ChunkPlan> plans = PlanStore(layout_, Ids(43), kChunks);
  ASSERT_FALSE(plans.empty());
  DeviceBytes cancelled(8, true);
  ASSERT_TRUE(cancelled.error().empty()) << cancelled.error();
  const std::uint64_t ticket = 5;
  std::vector<std::byte> word(8);
  std::memcpy(word.data(), &ticket, 8);
  ASSERT_EQ(cancelled.Upload(word), CudaText(cudaSuccess));
  DeviceBytes object(layout_.object_bytes, false);
  ASSERT_EQ(object.Upload(std::vector<std::byte>(layout_.object_bytes, std::byte{0x5a})), CudaText(cudaSuccess));
  for (const GroupCopy& part : plans.front().groups) {
    const KvGroupLayout& g = layout_.groups[part.group];
    auto ids = DeviceIds(part.block_ids);
    auto bases = DeviceBases(a, part.group);
    const kv::ChunkCopy copy{g.paged, g.object(), reinterpret_cast<const std::int32_t*>(ids->device()), g.slots, 0};
    const auto* flag = reinterpret_cast<const volatile std::uint64_t*>(cancelled.device());
    ASSERT_EQ(kv::LaunchGather(copy, reinterpret_cast<const std::uint64_t*>(bases->device()),
                               object.device() + g.object_offset, nullptr, {flag, ticket}),
              0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  EXPECT_EQ(FirstDifference(object.Download(), std::vector<std::byte>(layout_.object_bytes, std::byte{0x5a})), -1);
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  const Layout split[] = {Layout::kFlashAttnNhd, Layout::kFlashAttnHnd, Layout::kBlocksFirstNhd,
                          Layout::kBlocksFirstHnd, Layout::kCrossLayer};
  const Layout packed[] = {Layout::kPackedHnd, Layout::kPackedNhd, Layout::kSharedLbhnc, Layout::kSharedLbnhc,
                           Layout::kSharedBlhnc};
  // Head sizes of today's models (64: small, 128: Llama/Qwen/Mistral, 256:
  // Gemma) and one whose rows are no multiple of 16 bytes at one byte per
  // element (byte-by-byte copies); 8 KV heads (Llama-3-8B, a 70B TP-1 rank)
  // and 1 (a 70B TP-8 rank).
  for (const std::uint32_t e : {1u, 2u, 4u}) {
    for (const std::int64_t hs : {64, 128, 256, 72}) {
      for (const Layout l : split) out.push_back({l, e, hs, 8});
      for (const Layout l : packed) out.push_back({l, e, hs, 8});
    }
    out.push_back({Layout::kSharedLbhnc, e, 128, 1});
    out.push_back({Layout::kFlashAttnHnd, e, 128, 1});
    // MLA: DeepSeek's 576-wide latent (512 + 64 rope), fp8_ds_mla's 656 and 584 bytes.
    for (const std::int64_t c : {576, 656, 584}) {
      out.push_back({Layout::kMla, e, c, 1});
      out.push_back({Layout::kSharedMla4d, e, c, 1});
    }
  }
  // Several groups (one a sliding window), and objects in mapped pinned host memory.
  for (const Layout l : {Layout::kSharedLbhnc, Layout::kBlocksFirstNhd, Layout::kMla}) {
    out.push_back({l, 2, l == Layout::kMla ? 576 : 128, l == Layout::kMla ? 1 : 8, true, false});
    out.push_back({l, 2, l == Layout::kMla ? 576 : 128, l == Layout::kMla ? 1 : 8, false, true});
  }
  return out;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "case" + std::to_string(info.index) + "_layout" + std::to_string(static_cast<int>(c.layout)) + "_e" +
         std::to_string(c.element_size) + "_hs" + std::to_string(c.head_size) + "_h" + std::to_string(c.heads) +
         (c.two_groups ? "_groups2" : "") + (c.pinned_object ? "_pinned" : "");
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaKvCopyTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace lmcache::gpu
