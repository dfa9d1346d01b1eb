// SerdeAdapter: an adapter's `serde` stores objects encoded (half the bytes
// for bfloat16 under fp8), counts what it could not encode and stores that
// raw, and whatever reads the tier afterwards, with a serde or without one,
// gets the object back. Inputs are bfloat16 values fp8 holds exactly, so the
// round trip is byte-exact (the codec's rounding is payload_codec_test's).
#include "tier/serde_adapter.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "fakes/fp8_values.h"
#include "fakes/keys.h"
#include "tier/mock/mock_adapter.h"
#include "tier/object_format.h"

namespace lmcache::tier {
namespace {

using testing::Fp8ExactBFloat16Bytes;
using testing::KeyN;

constexpr std::size_t kObject = 64 * 1024;

struct Fixture {
  explicit Fixture(PayloadCodec codec = PayloadCodec::kFp8E4M3) {
    auto made = std::make_unique<MockAdapter>(MockAdapterConfig{});
    mock = made.get();
    serde = std::make_unique<SerdeAdapter>(std::move(made), SerdeConfig{codec}, &directory);
  }
  ElementTypeDirectory directory;
  MockAdapter* mock = nullptr;
  std::unique_ptr<SerdeAdapter> serde;
};

Status StoreOne(L2Adapter& a, const store::ObjectKey& key, std::span<const std::byte> bytes) {
  const std::vector<L2Write> writes = {{&key, bytes, {}}};
  return a.Store(writes)[0];
}

L2LoadOutcome LoadOne(L2Adapter& a, const store::ObjectKey& key, std::span<std::byte> out) {
  const std::vector<L2Read> reads = {{&key, out}};
  return a.Load(reads)[0];
}

TEST(SerdeAdapterTest, StoresHalfTheBytesAndEveryReaderDecodesThem) {
  Fixture f;
  std::vector<std::pair<std::string, std::uint64_t>> asked;
  f.directory.Bind([&asked](const store::ObjectKey& key, std::uint64_t bytes) {
    asked.emplace_back(key.model_name, bytes);
    return ElementType::kBFloat16;
  });
  const auto key = KeyN(1, "org/model");
  const auto bytes = Fp8ExactBFloat16Bytes(kObject, 1);
  ASSERT_TRUE(StoreOne(*f.serde, key, bytes).ok());
  EXPECT_EQ(asked, (std::vector<std::pair<std::string, std::uint64_t>>{{"org/model", kObject}}));

  const L2AdapterStats s = f.serde->Stats();
  EXPECT_EQ(s.serde, "fp8-e4m3");
  EXPECT_EQ(s.serde_encoded_objects, 1u);
  EXPECT_EQ(s.serde_encoded_object_bytes, kObject);
  EXPECT_EQ(s.serde_encoded_bytes, kObject / 2);
  EXPECT_EQ(s.serde_raw_objects, 0u);
  // What the tier holds and counts: the encoded payload and its header.
  EXPECT_EQ(s.stored_bytes, kObject / 2);
  EXPECT_EQ(s.usage_bytes, kObject / 2 + EncodedObjectHeaderBytes(key));

  std::vector<std::byte> out(kObject);
  ASSERT_EQ(LoadOne(*f.serde, key, out), L2LoadOutcome::kLoaded);
  EXPECT_EQ(out, bytes);
  // The tier read without the serde (its config changed): decoded all the same.
  std::vector<std::byte> plain(kObject);
  ASSERT_EQ(LoadOne(*f.mock, key, plain), L2LoadOutcome::kLoaded);
  EXPECT_EQ(plain, bytes);
  // A reader of another layout (another object size) misses it.
  std::vector<std::byte> other(kObject / 2);
  EXPECT_EQ(LoadOne(*f.mock, key, other), L2LoadOutcome::kMissing);
}

TEST(SerdeAdapterTest, WhatItCannotEncodeIsStoredRawCountedAndLoadsAsItWas) {
  Fixture f;
  const auto unknown = KeyN(1);
  const auto bytes = Fp8ExactBFloat16Bytes(kObject, 2);
  // Nothing bound yet (a restarted server before its workers register).
  ASSERT_TRUE(StoreOne(*f.serde, unknown, bytes).ok());
  f.directory.Bind([](const store::ObjectKey& key, std::uint64_t) {
    return key.model_name == "fp8-already" ? ElementType::kUnknown : ElementType::kBFloat16;
  });
  const auto already = KeyN(2, "fp8-already");
  ASSERT_TRUE(StoreOne(*f.serde, already, bytes).ok());
  // Too small for the encoding to save more than its 4 KiB header.
  const auto small_key = KeyN(3);
  const auto small = Fp8ExactBFloat16Bytes(6 * 1024, 3);
  ASSERT_TRUE(StoreOne(*f.serde, small_key, small).ok());
  f.directory.Bind(nullptr);
  const auto unbound = KeyN(4);
  ASSERT_TRUE(StoreOne(*f.serde, unbound, bytes).ok());

  const L2AdapterStats s = f.serde->Stats();
  EXPECT_EQ(s.serde_raw_objects, 4u);
  EXPECT_EQ(s.serde_encoded_objects, 0u);
  EXPECT_EQ(s.stored_bytes, 3 * kObject + small.size());
  for (const auto& [key, expected] : {std::pair{&unknown, &bytes}, std::pair{&already, &bytes},
                                      std::pair{&small_key, &small}, std::pair{&unbound, &bytes}}) {
    std::vector<std::byte> out(expected->size());
    ASSERT_EQ(LoadOne(*f.serde, *key, out), L2LoadOutcome::kLoaded) << key->DebugString();
    EXPECT_EQ(out, *expected) << key->DebugString();
  }
}

TEST(SerdeAdapterTest, ADamagedEncodedObjectIsACorruptMissAndIsDeleted) {
  Fixture f(PayloadCodec::kFp8E5M2);
  f.directory.Bind([](const store::ObjectKey&, std::uint64_t) { return ElementType::kFloat32; });
  const auto key = KeyN(1);
  const auto bytes = Fp8ExactBFloat16Bytes(kObject, 4);  // any 4-byte elements will do here
  ASSERT_TRUE(StoreOne(*f.serde, key, bytes).ok());
  EXPECT_EQ(f.serde->Stats().serde_encoded_bytes, kObject / 4);
  ASSERT_TRUE(f.mock->CorruptForTest(key));
  std::vector<std::byte> out(kObject, std::byte{0x11});
  EXPECT_EQ(LoadOne(*f.serde, key, out), L2LoadOutcome::kCorrupt);
  EXPECT_EQ(f.serde->Stats().checksum_failures, 1u);
  EXPECT_EQ(LoadOne(*f.serde, key, out), L2LoadOutcome::kMissing);  // and deleted
}

// The lossless serde: byte for byte, including objects of unknown element
// type (one plane); what does not compress (random bytes) is stored raw.
TEST(SerdeAdapterTest, LosslessStoresLessAndLoadsEveryByteBack) {
  Fixture f(PayloadCodec::kLossless);
  f.directory.Bind([](const store::ObjectKey& key, std::uint64_t) {
    return key.model_name == "unknown-dtype" ? ElementType::kUnknown : ElementType::kBFloat16;
  });
  const auto typed = KeyN(1), untyped = KeyN(2, "unknown-dtype"), noise = KeyN(3);
  // Exponents that repeat: what the top plane's zstd saves on.
  const auto bytes = Fp8ExactBFloat16Bytes(kObject, 6);
  std::vector<std::byte> random(kObject);
  std::uint32_t state = 12345;
  for (auto& b : random) {
    state = state * 1664525u + 1013904223u;
    b = std::byte(static_cast<unsigned char>(state >> 24));
  }
  ASSERT_TRUE(StoreOne(*f.serde, typed, bytes).ok());
  ASSERT_TRUE(StoreOne(*f.serde, untyped, bytes).ok());
  ASSERT_TRUE(StoreOne(*f.serde, noise, random).ok());
  const L2AdapterStats s = f.serde->Stats();
  EXPECT_EQ(s.serde, "lossless");
  EXPECT_EQ(s.serde_encoded_objects, 2u);
  EXPECT_EQ(s.serde_raw_objects, 1u);
  EXPECT_EQ(s.serde_encoded_object_bytes, 2 * kObject);
  EXPECT_LT(s.serde_encoded_bytes, 2 * kObject);
  for (const auto& [key, expected] : {std::pair{&typed, &bytes}, std::pair{&untyped, &bytes},
                                      std::pair{&noise, &std::as_const(random)}}) {
    std::vector<std::byte> out(kObject);
    ASSERT_EQ(LoadOne(*f.mock, *key, out), L2LoadOutcome::kLoaded) << key->DebugString();
    EXPECT_EQ(out, *expected) << key->DebugString();
  }
}

// A serde inside another (a fault adapter between them, as an operator may
// configure): what the outer one encoded is stored as it is, not encoded
// again, and loads back.
TEST(SerdeAdapterTest, AnObjectEncodedAlreadyIsStoredAsItIs) {
  ElementTypeDirectory directory;
  directory.Bind([](const store::ObjectKey&, std::uint64_t) { return ElementType::kBFloat16; });
  auto made = std::make_unique<MockAdapter>(MockAdapterConfig{});
  MockAdapter* mock = made.get();
  auto inner = std::make_unique<SerdeAdapter>(std::move(made), SerdeConfig{PayloadCodec::kLossless},
                                              &directory);
  SerdeAdapter* inner_serde = inner.get();
  SerdeAdapter outer(std::move(inner), SerdeConfig{PayloadCodec::kFp8E4M3}, &directory);
  const auto key = KeyN(1);
  const auto bytes = Fp8ExactBFloat16Bytes(kObject, 8);
  ASSERT_TRUE(StoreOne(outer, key, bytes).ok());
  EXPECT_EQ(outer.Stats().serde_encoded_objects, 1u);
  EXPECT_EQ(inner_serde->Stats().serde_encoded_objects, 0u);
  EXPECT_EQ(inner_serde->Stats().serde_raw_objects, 0u);
  std::vector<std::byte> out(kObject);
  ASSERT_EQ(LoadOne(*mock, key, out), L2LoadOutcome::kLoaded);
  EXPECT_EQ(out, bytes);
}

}  // namespace
}  // namespace lmcache::tier
