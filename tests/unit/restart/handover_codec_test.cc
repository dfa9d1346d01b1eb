// The takeover protocol's byte form: what a predecessor encodes its successor
// decodes to the same values, and bytes from anyone else are refused with a
// message that names the field, never trusted.
#include "restart/handover_codec.h"

#include <gtest/gtest.h>

#include "fakes/keys.h"

namespace lmcache::restart {
namespace {

HandoverImage SampleImage() {
  HandoverImage image;
  image.boot_id = "0123456789abcdef0123456789abcdef";
  image.shm_name = "lmcache_l1_pool_node";
  image.pool.ready_bytes = 1ull << 30;
  image.pool.slabs = {{0, 32, 262144}, {32, 1, 4096}};
  store::ObjectKey tagged = testing::KeyN(2, "org/model", *store::PackKvRank(2, 1));
  tagged.cache_salt = "tenant-a";
  tagged.tags = "application_version%v2";
  tagged.layout_namespace = 0x9e3779b9;
  tagged.object_group_id = 1;
  image.pool.table.resident = {{testing::KeyN(1), 0, 262144, false, std::nullopt},
                               {tagged, 262144, 200000, true, std::nullopt}};
  image.pool.table.held = {{524288, 262144}};
  worker::ChunkLayout layout;
  layout.num_layers = 32;
  layout.hidden_dim = 1024;
  layout.chunk_size = 256;
  layout.dtype = "bfloat16";
  layout.shape = {2, 32, 256, 1024};
  layout.parts = {{{2, 32, 256, 1024}, "bfloat16"}};
  layout.object_bytes = 2ull * 32 * 256 * 1024 * 2;
  image.registrations = {{7, "org/model", 2, layout}};
  return image;
}

TEST(HandoverCodec, AnImageRoundTripsFieldForField) {
  const HandoverImage image = SampleImage();
  const std::string bytes = EncodeImage(image);
  auto decoded = DecodeImage(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->boot_id, image.boot_id);
  EXPECT_EQ(decoded->shm_name, image.shm_name);
  EXPECT_EQ(decoded->pool.ready_bytes, image.pool.ready_bytes);
  EXPECT_EQ(decoded->pool.slabs, image.pool.slabs);
  ASSERT_EQ(decoded->pool.table.resident.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const store::AdoptedObject& a = image.pool.table.resident[i];
    const store::AdoptedObject& b = decoded->pool.table.resident[i];
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(a.size, b.size);
    EXPECT_EQ(a.read_locked, b.read_locked);
  }
  ASSERT_EQ(decoded->pool.table.held.size(), 1u);
  EXPECT_EQ(decoded->pool.table.held[0].offset, 524288u);
  ASSERT_EQ(decoded->registrations.size(), 1u);
  EXPECT_EQ(decoded->registrations[0].instance_id, 7);
  EXPECT_EQ(decoded->registrations[0].world_size, 2);
  EXPECT_TRUE(decoded->registrations[0].layout.SameGeometry(image.registrations[0].layout));
  EXPECT_EQ(decoded->registrations[0].layout.object_bytes,
            image.registrations[0].layout.object_bytes);
  EXPECT_EQ(EncodeImage(*decoded), bytes) << "the format is canonical";
}

TEST(HandoverCodec, EveryTruncationAndTrailingByteIsRefused) {
  const std::string bytes = EncodeImage(SampleImage());
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    auto decoded = DecodeImage(std::string_view(bytes).substr(0, cut));
    ASSERT_FALSE(decoded.ok()) << "a prefix of " << cut << " bytes decoded";
    EXPECT_EQ(decoded.status().code(), ErrorCode::kMalformedRequest);
  }
  auto longer = DecodeImage(bytes + "x");
  EXPECT_EQ(longer.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_NE(longer.status().message().find("follow"), std::string::npos);
}

TEST(HandoverCodec, ACountLargerThanTheBytesLeftIsRefusedBeforeAnyAllocation) {
  // boot id "", shm name "", ready bytes, then a slab count of 2^60.
  std::string bytes(4 + 4 + 8, '\0');
  bytes += std::string("\0\0\0\0\0\0\0\x10", 8);
  auto decoded = DecodeImage(bytes);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("slabs counts"), std::string::npos)
      << decoded.status().message();
}

TEST(HandoverCodec, HelloAndVerdictRoundTripAndRefuseWhatTheyDoNotKnow) {
  TakeoverHello hello;
  hello.geometry = {
      "lmcache_l1_pool_node", {64ull << 30, 4096, 2u << 20, 64u << 20}, store::ChunkSizes(256)};
  hello.cold_if_incompatible = true;
  auto decoded = DecodeHello(EncodeHello(hello));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->geometry, hello.geometry);
  EXPECT_TRUE(decoded->cold_if_incompatible);
  hello.version = kHandoverVersion + 1;
  auto newer = DecodeHello(EncodeHello(hello));
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("version"), std::string::npos);
  std::string bad_bool = EncodeHello(TakeoverHello{});
  bad_bool.back() = '\x02';
  EXPECT_FALSE(DecodeHello(bad_bool).ok());

  // Models' own chunk sizes ride after the last field; a hello without
  // them is byte for byte the previous version's (which ends at the bool).
  hello.version = kHandoverVersion;
  const std::string plain = EncodeHello(hello);
  EXPECT_EQ(plain.back(), '\x01');
  hello.geometry.chunk_sizes = store::ChunkSizes(256, {{"glm", 640}, {"mla", 384}});
  const std::string with_models = EncodeHello(hello);
  EXPECT_EQ(with_models.substr(0, plain.size()), plain);
  auto models = DecodeHello(with_models);
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_EQ(models->geometry.chunk_sizes, hello.geometry.chunk_sizes);
  for (std::size_t cut = plain.size() + 1; cut < with_models.size(); ++cut) {
    EXPECT_FALSE(DecodeHello(with_models.substr(0, cut)).ok()) << "cut at " << cut;
  }
  // The last model's size (the last 8 bytes) as 0: checked as a peer's would be.
  std::string zero_size = with_models;
  zero_size.replace(zero_size.size() - 8, 8, std::string(8, '\0'));
  EXPECT_EQ(DecodeHello(zero_size).status().code(), ErrorCode::kMalformedRequest);
  // One encoding per hello (the handover fuzzer re-encodes what decodes): an
  // empty tail, and models out of order or twice, are refused.
  EXPECT_EQ(DecodeHello(plain + std::string(8, '\0')).status().code(),
            ErrorCode::kMalformedRequest);
  std::string swapped = with_models;  // "glm" then "mla": swap the two names' first letters
  const std::size_t glm = swapped.find("glm");
  const std::size_t mla = swapped.find("mla");
  ASSERT_NE(glm, std::string::npos);
  ASSERT_NE(mla, std::string::npos);
  std::swap(swapped[glm], swapped[mla]);  // "mlm" before "gla": out of order
  EXPECT_EQ(DecodeHello(swapped).status().code(), ErrorCode::kMalformedRequest);

  auto verdict = DecodeVerdict(EncodeVerdict({Verdict::kCold, "size differs"}));
  ASSERT_TRUE(verdict.ok());
  EXPECT_EQ(verdict->verdict, Verdict::kCold);
  EXPECT_EQ(verdict->message, "size differs");
  std::string unknown = EncodeVerdict({Verdict::kHandover, ""});
  unknown[0] = '\x09';
  EXPECT_EQ(DecodeVerdict(unknown).status().code(), ErrorCode::kMalformedRequest);
}

// The handover fuzzer's find (a hello with an empty models tail decoded,
// then re-encoded without it): what decodes re-encodes to the same bytes.
TEST(HandoverCodec, AHelloThatDecodesReencodesToTheSameBytes) {
  const unsigned char found[] = {
      0x01, 0x00, 0x00, 0x00, 0x1a, 0x00, 0x00, 0x00, 0x6c, 0x6d, 0x63, 0x61, 0x63, 0x68,
      0x65, 0x5f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x01, 0x00, 0x00, 0x00, 0x1a, 0x00, 0x00, 0x00,
      0x6c, 0x6d, 0x63, 0x61, 0x63, 0x68, 0x65, 0x5f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  const std::string bytes(reinterpret_cast<const char*>(found), sizeof(found));
  auto hello = DecodeHello(bytes);
  if (hello.ok()) EXPECT_EQ(EncodeHello(*hello), bytes);
}

TEST(HandoverCodec, AGeometryMismatchNamesTheSettingAndBothValues) {
  const TakeoverGeometry ours{
      "lmcache_l1_pool_node", {4ull << 30, 4096, 2u << 20, 64u << 20}, store::ChunkSizes(256)};
  EXPECT_EQ(GeometryMismatch(ours, ours), "");
  TakeoverGeometry bigger = ours;
  bigger.pool.pool_bytes = 8ull << 30;
  EXPECT_EQ(GeometryMismatch(ours, bigger),
            "the pool size in bytes (--l1-size-gb): 4294967296 here, 8589934592 in the successor");
  TakeoverGeometry chunk = ours;
  chunk.chunk_sizes = store::ChunkSizes(16);
  EXPECT_EQ(GeometryMismatch(ours, chunk),
            "the chunk sizes (--chunk-size, --model-chunk-size): 256 here, 16 in the successor");
  TakeoverGeometry model = ours;
  model.chunk_sizes = store::ChunkSizes(256, {{"glm", 640}});
  EXPECT_EQ(GeometryMismatch(ours, model),
            "the chunk sizes (--chunk-size, --model-chunk-size): 256 here, 256 (glm=640) in the "
            "successor");
  TakeoverGeometry aligned = ours;
  aligned.pool.align_bytes = 8192;
  EXPECT_EQ(GeometryMismatch(ours, aligned),
            "the alignment (--l1-align-bytes): 4096 here, 8192 in the successor");
  TakeoverGeometry other = ours;
  other.shm_name = "lmcache_l1_pool_other";
  EXPECT_NE(GeometryMismatch(ours, other).find("name"), std::string::npos);
}

}  // namespace
}  // namespace lmcache::restart
