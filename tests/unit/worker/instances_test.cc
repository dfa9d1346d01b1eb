#include "worker/instances.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fakes/fake_clock.h"

namespace lmcache::worker {
namespace {

constexpr std::int64_t kChunk = 256;
constexpr TimeMs kTimeoutMs = 30'000;
constexpr TimeMs kGraceMs = 120'000;

EngineContext Payload(std::int64_t instance, std::string model = "llama",
                               std::int64_t world = 2, std::int64_t layers = 32,
                               std::int64_t hidden = 1024, std::string dtype = "bfloat16",
                               bool mla = false) {
  EngineContext p;
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

ChunkLayout LayoutFor(const EngineContext& p) {
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

constexpr std::string_view kConn = "conn-1";

class InstanceRegistryTest : public ::testing::Test {
 protected:
  // Registers from `connection`; true when the instance is new.
  Result<bool> Register(const EngineContext& p, std::string_view connection = kConn) {
    LMC_ASSIGN_OR_RETURN(const RegisterOutcome outcome,
                         registry_.Register(p, LayoutFor(p), connection));
    return outcome.is_new;
  }
  InstanceInfo Info(std::int64_t id) {
    auto info = registry_.Authorize(id, kConn);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return info.ok() ? *info : InstanceInfo{};
  }
  bool Has(const std::vector<std::int64_t>& ids, std::int64_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  }

  testing::FakeClock clock_;
  InstanceRegistry registry_{&clock_, /*max_pending=*/4};
};

TEST_F(InstanceRegistryTest, RegisterNewThenRefresh) {
  auto first = Register(Payload(1));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(*first);
  const std::uint64_t serial = Info(1).registration;
  auto again = Register(Payload(1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(*again);
  EXPECT_EQ(Info(1).registration, serial);  // the same registration, refreshed
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
  EXPECT_FALSE(registry_.Authorize(2, kConn).ok());
}

TEST_F(InstanceRegistryTest, SecondInstanceWithTheSameGeometryShares) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  auto r = Register(Payload(2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r);
  EXPECT_EQ(registry_.size(), 2u);
  EXPECT_NE(Info(1).owner(), Info(2).owner());
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

TEST_F(InstanceRegistryTest, AuthorizeUnknownIsNotRegistered) {
  auto r = registry_.Authorize(42, kConn);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotRegistered);
  EXPECT_NE(r.status().message().find("42"), std::string::npos) << r.status().message();
  EXPECT_FALSE(registry_.Heartbeat(42, kConn));
}

TEST_F(InstanceRegistryTest, OnlyTheRegisteringConnectionMayActForAnInstance) {
  ASSERT_TRUE(Register(Payload(1), "conn-a").ok());
  EXPECT_TRUE(registry_.Authorize(1, "conn-a").ok());
  auto other = registry_.Authorize(1, "conn-b");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_FALSE(registry_.Heartbeat(1, "conn-b"));
  EXPECT_EQ(registry_.Unregister(1, "conn-b").status().code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(registry_.size(), 1u);
}

TEST_F(InstanceRegistryTest, RegisteringFromANewConnectionReplacesTheOldRegistration) {
  ASSERT_TRUE(Register(Payload(1), "dead-process").ok());
  const InstanceInfo old = *registry_.Authorize(1, "dead-process");
  ASSERT_TRUE(registry_.AddPendingWrite(old, "w", {11, 2}).ok());
  ASSERT_TRUE(registry_.AddPendingRead(old, "r", 12).ok());
  auto outcome = registry_.Register(Payload(1), LayoutFor(Payload(1)), "new-process");
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_TRUE(outcome->is_new);
  ASSERT_TRUE(outcome->replaced.has_value());
  EXPECT_EQ(outcome->replaced->writes, std::vector<store::LeaseId>{11});
  EXPECT_EQ(outcome->replaced->reads, std::vector<store::LeaseId>{12});
  EXPECT_NE(outcome->info.registration, old.registration);
  // The old registration's leftovers are gone and it can record nothing more.
  EXPECT_EQ(registry_.AddPendingWrite(old, "w2", {13, 1}).status().code(),
            ErrorCode::kNotRegistered);
  EXPECT_FALSE(registry_.TakePendingRead(old, "r").has_value());
}

TEST_F(InstanceRegistryTest, AuthorizeReturnsTheRegistration) {
  ASSERT_TRUE(Register(Payload(7, "llama", 2, 32, 1024, "torch.float16")).ok());
  const InstanceInfo info = Info(7);
  EXPECT_EQ(info.instance_id, 7);
  EXPECT_EQ(info.model_name, "llama");
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.layout.dtype, "float16");
  EXPECT_EQ(info.layout.object_bytes, 2u * 32 * kChunk * 1024 * 2);
}

TEST_F(InstanceRegistryTest, LayoutOfUnknownIsEmpty) {
  EXPECT_FALSE(registry_.LayoutOf("llama", 2).has_value());
  ASSERT_TRUE(Register(Payload(1)).ok());
  EXPECT_TRUE(registry_.LayoutOf("llama", 2).has_value());
  EXPECT_FALSE(registry_.LayoutOf("llama", 1).has_value());
  EXPECT_FALSE(registry_.LayoutOf("other", 2).has_value());
}

TEST_F(InstanceRegistryTest, UnregisterReturnsThePendingLeases) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  const InstanceInfo info = Info(1);
  ASSERT_TRUE(registry_.AddPendingWrite(info, "w", {5, 2}).ok());
  ASSERT_TRUE(registry_.AddPendingRead(info, "r", 6).ok());
  ASSERT_TRUE(registry_.AddPendingRead(info, "r", 7).ok());
  auto removed = registry_.Unregister(1, kConn);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->info.instance_id, 1);
  EXPECT_EQ(removed->writes, std::vector<store::LeaseId>{5});
  EXPECT_EQ(removed->reads, (std::vector<store::LeaseId>{6, 7}));
  EXPECT_EQ(registry_.size(), 0u);
  EXPECT_EQ(registry_.Unregister(1, kConn).status().code(), ErrorCode::kNotRegistered);
  EXPECT_EQ(registry_.Authorize(1, kConn).status().code(), ErrorCode::kNotRegistered);
}

TEST_F(InstanceRegistryTest, APrepareThatLostTheRaceWithUnregisterCannotRecord) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  const InstanceInfo info = Info(1);  // a prepare checked the registration...
  ASSERT_TRUE(registry_.Remove(1).has_value());  // ...the reaper removed it meanwhile
  EXPECT_EQ(registry_.AddPendingWrite(info, "w", {5, 2}).status().code(),
            ErrorCode::kNotRegistered);
  EXPECT_EQ(registry_.AddPendingRead(info, "r", 6).code(), ErrorCode::kNotRegistered);
  ASSERT_TRUE(Register(Payload(1)).ok());  // even when the same id registers again
  EXPECT_EQ(registry_.AddPendingRead(info, "r", 6).code(), ErrorCode::kNotRegistered);
}

TEST_F(InstanceRegistryTest, LayoutIsDroppedWhenTheLastInstanceLeaves) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  ASSERT_TRUE(Register(Payload(2)).ok());
  ASSERT_TRUE(registry_.Unregister(1, kConn).ok());
  EXPECT_TRUE(registry_.LayoutOf("llama", 2).has_value());
  EXPECT_EQ(Register(Payload(3, "llama", 2, 16)).status().code(), ErrorCode::kLayoutMismatch);
  ASSERT_TRUE(registry_.Unregister(2, kConn).ok());
  EXPECT_FALSE(registry_.LayoutOf("llama", 2).has_value());
  auto r = Register(Payload(3, "llama", 2, 16));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(registry_.LayoutOf("llama", 2)->num_layers, 16);
}

TEST_F(InstanceRegistryTest, APendingWriteIsReplacedByTheNextPrepareOfTheSameTransfer) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  const InstanceInfo info = Info(1);
  auto first = registry_.AddPendingWrite(info, "t", {5, 3});
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->has_value());
  auto second = registry_.AddPendingWrite(info, "t", {6, 4});
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(second->has_value());
  EXPECT_EQ((*second)->lease, 5u);  // handed back for the caller to abort
  EXPECT_EQ(registry_.Counts().pending_writes, 1u);
  auto taken = registry_.TakePendingWrite(info, "t");
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->lease, 6u);
  EXPECT_EQ(taken->objects, 4u);
  EXPECT_FALSE(registry_.TakePendingWrite(info, "t").has_value());
}

TEST_F(InstanceRegistryTest, PendingReadsAreTakenInTheOrderTheyWereMade) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  const InstanceInfo info = Info(1);
  ASSERT_TRUE(registry_.AddPendingRead(info, "t", 8).ok());
  ASSERT_TRUE(registry_.AddPendingRead(info, "t", 9).ok());
  EXPECT_EQ(registry_.Counts().pending_reads, 2u);
  EXPECT_EQ(registry_.TakePendingRead(info, "t"), std::optional<store::LeaseId>(8));
  EXPECT_EQ(registry_.TakePendingRead(info, "t"), std::optional<store::LeaseId>(9));
  EXPECT_FALSE(registry_.TakePendingRead(info, "t").has_value());
}

TEST_F(InstanceRegistryTest, PendingTransfersAreKeptPerInstanceAndTransfer) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  ASSERT_TRUE(Register(Payload(2)).ok());
  ASSERT_TRUE(registry_.AddPendingWrite(Info(1), "a", {1, 1}).ok());
  ASSERT_TRUE(registry_.AddPendingWrite(Info(1), "b", {2, 1}).ok());
  ASSERT_TRUE(registry_.AddPendingWrite(Info(2), "a", {3, 1}).ok());
  EXPECT_EQ(registry_.Counts().pending_writes, 3u);
  EXPECT_EQ(registry_.TakePendingWrite(Info(2), "a")->lease, 3u);
  EXPECT_EQ(registry_.TakePendingWrite(Info(1), "a")->lease, 1u);
  EXPECT_FALSE(registry_.TakePendingWrite(Info(1), "c").has_value());
  EXPECT_FALSE(registry_.TakePendingRead(Info(1), "b").has_value());  // writes and reads are apart
  EXPECT_EQ(registry_.TakePendingWrite(Info(1), "b")->lease, 2u);
}

TEST_F(InstanceRegistryTest, PendingTransfersAreBoundedPerInstance) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  const InstanceInfo info = Info(1);
  for (int i = 0; i < 4; ++i) {
    // Built piecewise: "t" + std::to_string(i) trips GCC 12's -Wrestrict false positive.
    std::string request(1, 't');
    request += std::to_string(i);
    ASSERT_TRUE(registry_.AddPendingRead(info, request, 10 + i).ok());
    ASSERT_TRUE(registry_.AddPendingWrite(info, request, {20u + i, 1}).ok());
  }
  EXPECT_EQ(registry_.AddPendingRead(info, "x", 99).code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(registry_.AddPendingWrite(info, "x", {99, 1}).status().code(),
            ErrorCode::kResourceExhausted);
  EXPECT_TRUE(registry_.AddPendingWrite(info, "t0", {30, 1}).ok());  // replacing is fine
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
  ASSERT_TRUE(registry_.Authorize(1, kConn).ok());
  clock_.Advance(kTimeoutMs);
  EXPECT_TRUE(registry_.Silent(kTimeoutMs, kGraceMs).empty());
  clock_.Advance(1);
  const auto silent = registry_.Silent(kTimeoutMs, kGraceMs);
  EXPECT_TRUE(Has(silent, 1));
  EXPECT_FALSE(Has(silent, 2));  // never heard: still in its grace
}

TEST_F(InstanceRegistryTest, HeartbeatKeepsAnInstanceAlive) {
  ASSERT_TRUE(Register(Payload(1)).ok());
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(kTimeoutMs - 1'000);
    ASSERT_TRUE(registry_.Heartbeat(1, kConn));
    EXPECT_TRUE(registry_.Silent(kTimeoutMs, kGraceMs).empty()) << "step " << i;
  }
  clock_.Advance(kTimeoutMs + 1);
  EXPECT_EQ(registry_.Silent(kTimeoutMs, kGraceMs), std::vector<std::int64_t>{1});
}

// A registration carried across a takeover: held for no connection until
// the worker's first request (on its new connection) claims it.
TEST_F(InstanceRegistryTest, ACarriedRegistrationIsClaimedByTheFirstConnectionThatNamesIt) {
  ASSERT_TRUE(registry_.Register(Payload(1), LayoutFor(Payload(1)), "old-conn").ok());
  ASSERT_TRUE(registry_.Register(Payload(2), LayoutFor(Payload(2)), "old-conn").ok());
  const std::vector<CarriedRegistration> carried = registry_.Carry();
  ASSERT_EQ(carried.size(), 2u);

  InstanceRegistry successor(&clock_, 4);
  for (const CarriedRegistration& c : carried) ASSERT_TRUE(successor.Adopt(c).ok());
  EXPECT_EQ(successor.Adopt(carried[0]).code(), ErrorCode::kInvalidArgument) << "carried twice";
  EXPECT_TRUE(successor.LayoutOf("llama", 2).has_value());
  // Nobody's until a request claims it; then only that connection's.
  EXPECT_TRUE(successor.RemoveConnection("new-conn").empty());
  auto claimed = successor.Authorize(1, "new-conn");
  ASSERT_TRUE(claimed.ok());
  EXPECT_EQ(claimed->model_name, "llama");
  EXPECT_TRUE(claimed->layout.SameGeometry(LayoutFor(Payload(1))));
  EXPECT_EQ(successor.Authorize(1, "other-conn").status().code(), ErrorCode::kPermissionDenied);
  EXPECT_TRUE(successor.Heartbeat(2, "second-conn")) << "a ping claims it too";
  EXPECT_EQ(successor.RemoveConnection("new-conn").size(), 1u);
}

TEST_F(InstanceRegistryTest, ACarriedRegistrationNobodyClaimsGoesWithTheGraceAndARegisterReplacesIt) {
  InstanceRegistry successor(&clock_, 4);
  ASSERT_TRUE(successor.Adopt({1, "llama", 2, LayoutFor(Payload(1))}).ok());
  ASSERT_TRUE(successor.Adopt({2, "llama", 2, LayoutFor(Payload(2))}).ok());
  // A contradicting layout for the same model is refused, as a register would be.
  EXPECT_EQ(successor.Adopt({3, "llama", 2, LayoutFor(Payload(3, "llama", 2, 16))}).code(),
            ErrorCode::kLayoutMismatch);
  auto again = successor.Register(Payload(2), LayoutFor(Payload(2)), "fresh-conn");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->replaced.has_value()) << "the carried one is replaced, nothing leaks";
  clock_.Advance(kGraceMs + 1);
  EXPECT_EQ(successor.Silent(kTimeoutMs, kGraceMs), (std::vector<std::int64_t>{1, 2}));
}

}  // namespace
}  // namespace lmcache::worker
