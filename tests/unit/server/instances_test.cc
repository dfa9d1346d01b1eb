#include "server/instances.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fakes/fake_clock.h"
#include "fakes/keys.h"

namespace lmcache::server {
namespace {

using testing::KeyN;
using testing::KeysN;

constexpr std::int64_t kChunk = 256;
constexpr TimeMs kTimeoutMs = 30'000;
constexpr TimeMs kGraceMs = 120'000;

RegisterContextPayload Payload(std::int64_t instance, std::string model = "llama",
                               std::int64_t world = 2, std::int64_t layers = 32,
                               std::int64_t hidden = 1024, std::string dtype = "bfloat16",
                               bool mla = false) {
  RegisterContextPayload p;
  p.instance_id = instance;
  p.model_name = std::move(model);
  p.world_size = world;
  p.block_size = 16;
  p.num_layers = layers;
  p.hidden_dim_size = hidden;
  p.dtype_str = std::move(dtype);
  p.use_mla = mla;
  return p;
}

ChunkLayout LayoutFor(const RegisterContextPayload& p) {
  auto layout = MakeChunkLayout(p, kChunk);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return layout.ok() ? *layout : ChunkLayout{};
}

// --- DtypeItemSize ------------------------------------------------------------------------

TEST(DtypeItemSize, KnownNames) {
  EXPECT_EQ(*DtypeItemSize("bfloat16"), 2u);
  EXPECT_EQ(*DtypeItemSize("float32"), 4u);
  EXPECT_EQ(*DtypeItemSize("torch.float16"), 2u);
  EXPECT_EQ(*DtypeItemSize("half"), 2u);
  EXPECT_EQ(*DtypeItemSize("float64"), 8u);
  EXPECT_EQ(*DtypeItemSize("torch.float8_e4m3fn"), 1u);
  EXPECT_EQ(*DtypeItemSize("uint8"), 1u);
}

TEST(DtypeItemSize, UnknownNameIsAnErrorNamingIt) {
  for (const std::string bad : {"complex64", "", "torch.", "Float16", "torch.torch.float16"}) {
    auto r = DtypeItemSize(bad);
    ASSERT_FALSE(r.ok()) << "accepted '" << bad << "'";
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("'" + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

// --- MakeChunkLayout ----------------------------------------------------------------------

TEST(MakeChunkLayout, KvLayoutIsTwoByLayersByChunkByHidden) {
  auto layout = MakeChunkLayout(Payload(1, "llama", 2, 32, 1024, "torch.bfloat16"), kChunk);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->shape, (std::vector<std::int64_t>{2, 32, kChunk, 1024}));
  EXPECT_EQ(layout->object_bytes, 2u * 32 * kChunk * 1024 * 2);
  EXPECT_EQ(layout->dtype, "bfloat16");
  EXPECT_EQ(layout->num_layers, 32);
  EXPECT_EQ(layout->hidden_dim, 1024);
  EXPECT_EQ(layout->chunk_size, kChunk);
  EXPECT_FALSE(layout->use_mla);
}

TEST(MakeChunkLayout, MlaLayoutHasNoKvAxis) {
  auto layout = MakeChunkLayout(Payload(1, "deepseek", 1, 61, 576, "float32", true), 64);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->shape, (std::vector<std::int64_t>{61, 64, 576}));
  EXPECT_EQ(layout->object_bytes, 61u * 64 * 576 * 4);
  EXPECT_TRUE(layout->use_mla);
}

TEST(MakeChunkLayout, InvalidDimensionsNameTheField) {
  for (const std::int64_t layers : {0, -1}) {
    auto r = MakeChunkLayout(Payload(1, "m", 1, layers, 128), kChunk);
    ASSERT_FALSE(r.ok()) << layers;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("num_layers"), std::string::npos) << r.status().message();
  }
  for (const std::int64_t hidden :
       {std::int64_t{0}, std::int64_t{-8}, (std::int64_t{1} << 24) + 1}) {
    auto r = MakeChunkLayout(Payload(1, "m", 1, 4, hidden), kChunk);
    ASSERT_FALSE(r.ok()) << hidden;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("hidden_dim_size"), std::string::npos)
        << r.status().message();
  }
}

TEST(MakeChunkLayout, UnknownDtypeIsAnError) {
  auto r = MakeChunkLayout(Payload(1, "m", 1, 4, 128, "quaternion"), kChunk);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
}

// --- InstanceRegistry ---------------------------------------------------------------------

class InstanceRegistryTest : public ::testing::Test {
 protected:
  Result<bool> Register(const RegisterContextPayload& p) {
    return registry_.Register(p, LayoutFor(p));
  }
  bool Has(const std::vector<std::int64_t>& ids, std::int64_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  }

  testing::FakeClock clock_;
  InstanceRegistry registry_{&clock_};
};

TEST_F(InstanceRegistryTest, RegisterNewThenRefresh) {
  auto first = Register(Payload(1));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(*first);
  auto again = Register(Payload(1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(*again);
  EXPECT_EQ(registry_.size(), 1u);
}

TEST_F(InstanceRegistryTest, SameInstanceWithAnotherLayoutIsRefused) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  auto other = Register(Payload(1, "llama", 2, 16));
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), ErrorCode::kLayoutMismatch);
  auto other_model = Register(Payload(1, "mistral"));
  ASSERT_FALSE(other_model.ok());
  EXPECT_EQ(other_model.status().code(), ErrorCode::kLayoutMismatch);
  EXPECT_EQ(registry_.LayoutOf("llama", 2)->num_layers, 32);  // unchanged
}

TEST_F(InstanceRegistryTest, SecondInstanceWithAnotherGeometryIsRefused) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  auto r = Register(Payload(2, "llama", 2, 32, 1024, "float32"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kLayoutMismatch);
  EXPECT_NE(r.status().message().find("llama"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("float32"), std::string::npos) << r.status().message();
  EXPECT_EQ(registry_.size(), 1u);
  EXPECT_FALSE(registry_.Touch(2).ok());
}

TEST_F(InstanceRegistryTest, SecondInstanceWithTheSameGeometryShares) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  auto r = Register(Payload(2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r);
  EXPECT_EQ(registry_.size(), 2u);
}

TEST_F(InstanceRegistryTest, OtherModelOrWorldSizeMayUseAnotherGeometry) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  auto other_model = Register(Payload(2, "mistral", 2, 8, 512));
  ASSERT_TRUE(other_model.ok()) << other_model.status().ToString();
  auto other_world = Register(Payload(3, "llama", 4, 8, 512));
  ASSERT_TRUE(other_world.ok()) << other_world.status().ToString();
  EXPECT_EQ(registry_.LayoutOf("llama", 2)->num_layers, 32);
  EXPECT_EQ(registry_.LayoutOf("mistral", 2)->num_layers, 8);
  EXPECT_EQ(registry_.LayoutOf("llama", 4)->num_layers, 8);
}

TEST_F(InstanceRegistryTest, TouchUnknownIsNotRegistered) {
  auto r = registry_.Touch(42);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotRegistered);
  EXPECT_NE(r.status().message().find("42"), std::string::npos) << r.status().message();
}

TEST_F(InstanceRegistryTest, TouchReturnsTheRegistration) {
  ASSERT_TRUE(Register(Payload(7, "llama", 2, 32, 1024, "torch.float16")).ok());
  auto info = registry_.Touch(7);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->instance_id, 7);
  EXPECT_EQ(info->model_name, "llama");
  EXPECT_EQ(info->world_size, 2);
  EXPECT_EQ(info->layout.dtype, "float16");
  EXPECT_EQ(info->layout.object_bytes, 2u * 32 * kChunk * 1024 * 2);
}

TEST_F(InstanceRegistryTest, LayoutOfUnknownIsEmpty) {
  EXPECT_FALSE(registry_.LayoutOf("llama", 2).has_value());
  ASSERT_TRUE(Register(Payload(1)).ok());
  EXPECT_TRUE(registry_.LayoutOf("llama", 2).has_value());
  EXPECT_FALSE(registry_.LayoutOf("llama", 1).has_value());
  EXPECT_FALSE(registry_.LayoutOf("other", 2).has_value());
}

TEST_F(InstanceRegistryTest, UnregisterReturnsThePendingTransfers) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  registry_.AddPendingWrite(1, "w", KeysN(0, 2));
  registry_.AddPendingRead(1, "r", KeysN(10, 3));
  auto removed = registry_.Unregister(1);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->info.instance_id, 1);
  ASSERT_EQ(removed->pending_writes.count("w"), 1u);
  EXPECT_EQ(removed->pending_writes.at("w"), KeysN(0, 2));
  ASSERT_EQ(removed->pending_reads.count("r"), 1u);
  EXPECT_EQ(removed->pending_reads.at("r"), KeysN(10, 3));
  EXPECT_EQ(registry_.size(), 0u);
  EXPECT_FALSE(registry_.Unregister(1).has_value());
  EXPECT_EQ(registry_.Touch(1).status().code(), ErrorCode::kNotRegistered);
}

TEST_F(InstanceRegistryTest, LayoutIsDroppedWhenTheLastInstanceLeaves) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  ASSERT_TRUE(Register(Payload(2)).ok());
  ASSERT_TRUE(registry_.Unregister(1).has_value());
  EXPECT_TRUE(registry_.LayoutOf("llama", 2).has_value());
  EXPECT_EQ(Register(Payload(3, "llama", 2, 16)).status().code(), ErrorCode::kLayoutMismatch);
  ASSERT_TRUE(registry_.Unregister(2).has_value());
  EXPECT_FALSE(registry_.LayoutOf("llama", 2).has_value());
  auto r = Register(Payload(3, "llama", 2, 16));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(registry_.LayoutOf("llama", 2)->num_layers, 16);
}

TEST_F(InstanceRegistryTest, PendingWritesAreDeduplicated) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  registry_.AddPendingWrite(1, "t", KeysN(0, 3));
  registry_.AddPendingWrite(1, "t", KeysN(1, 3));  // 1 and 2 again, 3 new
  EXPECT_EQ(registry_.pending_writes(), 1u);
  auto keys = registry_.TakePendingWrite(1, "t");
  ASSERT_TRUE(keys.has_value());
  EXPECT_EQ(*keys, KeysN(0, 4));
  EXPECT_FALSE(registry_.TakePendingWrite(1, "t").has_value());
  EXPECT_EQ(registry_.pending_writes(), 0u);
}

TEST_F(InstanceRegistryTest, PendingReadsAreCounted) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  registry_.AddPendingRead(1, "t", KeysN(0, 2));
  registry_.AddPendingRead(1, "t", KeysN(0, 2));
  EXPECT_EQ(registry_.pending_reads(), 1u);
  auto keys = registry_.TakePendingRead(1, "t");
  ASSERT_TRUE(keys.has_value());
  ASSERT_EQ(keys->size(), 4u);
  EXPECT_EQ(std::count(keys->begin(), keys->end(), KeyN(0)), 2);
  EXPECT_EQ(std::count(keys->begin(), keys->end(), KeyN(1)), 2);
  EXPECT_FALSE(registry_.TakePendingRead(1, "t").has_value());
}

TEST_F(InstanceRegistryTest, PendingTransfersAreKeptPerInstanceAndTransfer) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  ASSERT_TRUE(Register(Payload(2)).ok());
  registry_.AddPendingWrite(1, "a", KeysN(0, 1));
  registry_.AddPendingWrite(1, "b", KeysN(5, 1));
  registry_.AddPendingWrite(2, "a", KeysN(9, 1));
  EXPECT_EQ(registry_.pending_writes(), 3u);
  EXPECT_EQ(*registry_.TakePendingWrite(2, "a"), KeysN(9, 1));
  EXPECT_EQ(*registry_.TakePendingWrite(1, "a"), KeysN(0, 1));
  EXPECT_FALSE(registry_.TakePendingWrite(1, "c").has_value());
  EXPECT_FALSE(registry_.TakePendingRead(1, "b").has_value());  // writes and reads are apart
  EXPECT_EQ(*registry_.TakePendingWrite(1, "b"), KeysN(5, 1));
}

TEST_F(InstanceRegistryTest, PendingForUnknownInstanceIsIgnored) {
  registry_.AddPendingWrite(9, "t", KeysN(0, 1));
  registry_.AddPendingRead(9, "t", KeysN(0, 1));
  EXPECT_EQ(registry_.pending_writes(), 0u);
  EXPECT_EQ(registry_.pending_reads(), 0u);
  EXPECT_FALSE(registry_.TakePendingWrite(9, "t").has_value());
  EXPECT_FALSE(registry_.TakePendingRead(9, "t").has_value());
}

TEST_F(InstanceRegistryTest, NeverHeardInstanceIsSilentOnlyAfterTheGrace) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  clock_.Advance(kTimeoutMs + 1);
  EXPECT_TRUE(registry_.Silent(kTimeoutMs, kGraceMs).empty());
  clock_.Advance(kGraceMs - kTimeoutMs - 1);  // exactly the grace
  EXPECT_TRUE(registry_.Silent(kTimeoutMs, kGraceMs).empty());
  clock_.Advance(1);
  EXPECT_EQ(registry_.Silent(kTimeoutMs, kGraceMs), std::vector<std::int64_t>{1});
}

TEST_F(InstanceRegistryTest, HeardInstanceIsSilentAfterTheTimeout) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  ASSERT_TRUE(Register(Payload(2)).ok());
  ASSERT_TRUE(registry_.Touch(1).ok());
  clock_.Advance(kTimeoutMs);
  EXPECT_TRUE(registry_.Silent(kTimeoutMs, kGraceMs).empty());
  clock_.Advance(1);
  const auto silent = registry_.Silent(kTimeoutMs, kGraceMs);
  EXPECT_TRUE(Has(silent, 1));
  EXPECT_FALSE(Has(silent, 2));  // never heard: still in its grace
}

TEST_F(InstanceRegistryTest, TouchKeepsAnInstanceAlive) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(kTimeoutMs - 1'000);
    ASSERT_TRUE(registry_.Touch(1).ok());
    EXPECT_TRUE(registry_.Silent(kTimeoutMs, kGraceMs).empty()) << "step " << i;
  }
  clock_.Advance(kTimeoutMs + 1);
  EXPECT_EQ(registry_.Silent(kTimeoutMs, kGraceMs), std::vector<std::int64_t>{1});
}

}  // namespace
}  // namespace lmcache::server
