// ChunkSizes: each model's chunk size, what an endpoint advertises, and
// which keys an endpoint serves; ParseModelChunkSizes' refusals.
#include "store/chunk_sizes.h"

#include <gtest/gtest.h>

namespace lmcache::store {
namespace {

const ChunkSizes kSizes(256, {{"glm", 640}, {"mla", 384}});

TEST(ChunkSizes, AModelHasItsOwnSizeOrTheDefault) {
  EXPECT_EQ(kSizes.For("glm"), 640);
  EXPECT_EQ(kSizes.For("mla"), 384);
  EXPECT_EQ(kSizes.For("llama"), 256);
  EXPECT_EQ(kSizes.For(""), 256);
  EXPECT_EQ(kSizes.Describe(), "256 (glm=640, mla=384)");
  EXPECT_EQ(ChunkSizes(16).Describe(), "16");
}

TEST(ChunkSizes, AnEndpointAdvertisesItsModelsSize) {
  EXPECT_EQ(kSizes.Advertised(""), 256);
  EXPECT_EQ(kSizes.Advertised("glm"), 640);
}

// A key is served where its size is the one its client learned: a model
// at the default size anywhere but another model's endpoint of another
// size; a model of its own size only where that size was advertised.
TEST(ChunkSizes, AKeyIsServedOnlyWhereItsSizeWasAdvertised) {
  EXPECT_TRUE(kSizes.CheckServedAt("", "llama").ok());
  EXPECT_TRUE(kSizes.CheckServedAt("glm", "glm").ok());
  const Status shared = kSizes.CheckServedAt("", "glm");
  EXPECT_EQ(shared.code(), ErrorCode::kLayoutMismatch);
  EXPECT_NE(shared.message().find("chunks of 640 tokens"), std::string::npos) << shared.message();
  EXPECT_NE(shared.message().find("--model-url glm=URL"), std::string::npos) << shared.message();
  const Status other = kSizes.CheckServedAt("glm", "llama");
  EXPECT_EQ(other.code(), ErrorCode::kLayoutMismatch);
  EXPECT_NE(other.message().find("an endpoint of every model (--url)"), std::string::npos)
      << other.message();
  EXPECT_EQ(kSizes.CheckServedAt("glm", "mla").code(), ErrorCode::kLayoutMismatch);
  // Another model of the same size as the endpoint's: its client learned
  // the size its keys are cut at.
  const ChunkSizes same(256, {{"a", 640}, {"b", 640}});
  EXPECT_TRUE(same.CheckServedAt("a", "b").ok());
}

TEST(ChunkSizes, ParsesModelSizesAndRefusesWhatCannotBeServed) {
  auto parsed = ParseModelChunkSizes({"org/model-a=640", "x=y=544"}, 256);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, (ChunkSizes::Overrides{{"org/model-a", 640}, {"x=y", 544}}));
  EXPECT_TRUE(ParseModelChunkSizes({}, 256)->empty());
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"m=255", "below --chunk-size (256)"},    {"m=", "is not a number"},
      {"m=-640", "must be in [1, 1048576]"},    {"=640", "MODEL=TOKENS"},
      {"m=2097152", "must be in [1, 1048576]"}, {"m=64 ", "is not a number"},
      {"m=256", "every model's size already"},
  };
  for (const auto& [spec, why] : refused) {
    auto result = ParseModelChunkSizes({spec}, 256);
    ASSERT_FALSE(result.ok()) << spec;
    EXPECT_EQ(result.status().code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(result.status().message().find(why), std::string::npos)
        << spec << ": " << result.status().message();
  }
  EXPECT_FALSE(ParseModelChunkSizes({"m=640", "m=640"}, 256).ok());
  std::vector<std::string> many;
  for (std::size_t i = 0; i <= kMaxModelChunkSizes; ++i)
    many.push_back("m" + std::to_string(i) + "=640");
  EXPECT_NE(ParseModelChunkSizes(many, 256).status().message().find("more than 1024"),
            std::string::npos);
  many.pop_back();
  EXPECT_TRUE(ParseModelChunkSizes(many, 256).ok());
  EXPECT_FALSE(
      ParseModelChunkSizes({std::string(2000, 'm') + "=640"}, 256).ok());  // too long a name
}

}  // namespace
}  // namespace lmcache::store
