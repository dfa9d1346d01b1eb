// register_kv_cache's frames as clients of each generation send them (5, 6
// or 7 frames; kv_cache as a list, or one bare tensor; engine_group_infos
// with unknown and nil fields), block_ids per group or flat, and the event
// reply. The wrapper bodies are real pickles (make_ipc_pickles.py).
#include "protocol/gpu_messages.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/wire_codec.h"

namespace lmcache::protocol {
namespace {

std::string Pickle(const std::string& name) {
  std::ifstream in(std::string(LMC_IPC_PICKLE_DIR) + "/" + name, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name << ": the make_ipc_pickles fixture did not run";
  return s.str();
}

struct Frames {
  std::vector<std::string> frames;
  std::vector<std::string_view> views() const { return {frames.begin(), frames.end()}; }
};

// [instance_id, kv_cache, model_name, world_size, engine_type, layout_hints, engine_group_infos]
Frames Register(std::size_t count, std::size_t layers = 3) {
  const std::string layer = Pickle("packed_view_devices.p4.pickle");
  Frames f;
  f.frames.push_back(Encoder().Int(0x7fffffffffff).Take());  // uuid4().int & (2^63 - 1)
  Encoder kv;
  kv.Array(static_cast<std::uint32_t>(layers));
  for (std::size_t i = 0; i < layers; ++i) kv.Ext(1, layer);
  f.frames.push_back(kv.Take());
  f.frames.push_back(Encoder().Str("meta-llama/Llama-3.1-8B").Take());
  f.frames.push_back(Encoder().Int(1).Take());
  f.frames.push_back(Encoder().Str("vllm").Take());
  f.frames.push_back(Encoder().Map(1).Str("kv_layout").Str("LBHNC").Take());
  Encoder groups;
  groups.Array(2);
  groups.Map(7).Str("engine_group_id").Int(0).Str("layer_indices").Array(2).Int(0).Int(1);
  groups.Str("tokens_per_block").Int(16).Str("sw_size_tokens").Int(-1);
  groups.Str("extra_object_group_tag").Nil().Str("recurrent_state").Bool(false);
  groups.Str("a_field_of_tomorrow").Map(1).Str("x").Array(0);
  groups.Map(4).Str("engine_group_id").Int(1).Str("layer_indices").Array(1).Int(2);
  groups.Str("sw_size_tokens").Int(128).Str("null_block_id").Nil();
  f.frames.push_back(groups.Take());
  f.frames.push_back(Encoder().Str("an eighth frame of a newer client").Take());
  f.frames.resize(count);
  return f;
}

TEST(GpuMessagesTest, SevenFramesAsCurrentClientsSendThemDecodeWithEveryGroup) {
  const Frames f = Register(7);
  const auto r = DecodeKvCacheRegistration(f.views());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instance_id, 0x7fffffffffff);
  ASSERT_EQ(r->layers.size(), 3u);
  EXPECT_EQ(r->layers[0].handle_form, ShareableHandleForm::kTorchCudaMalloc);
  EXPECT_FALSE(r->cross_layer);
  EXPECT_EQ(r->model_name, "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(r->engine_type, "vllm");
  EXPECT_EQ(r->hints.kv_layout, "LBHNC");
  ASSERT_EQ(r->groups.size(), 2u);
  EXPECT_EQ(r->groups[0].layer_indices, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(r->groups[0].tokens_per_block, 16);
  EXPECT_EQ(r->groups[0].null_block_id, 0) << "the default: vLLM's null block";
  EXPECT_EQ(r->groups[1].sw_size_tokens, 128);
  EXPECT_FALSE(r->groups[1].null_block_id.has_value()) << "nil: the group has no null block";
}

TEST(GpuMessagesTest, OlderClientsFiveOrSixFramesAndNewerOnesEightAreAccepted) {
  for (const std::size_t count : {5u, 6u, 8u}) {
    const Frames f = Register(count);
    const auto r = DecodeKvCacheRegistration(f.views());
    ASSERT_TRUE(r.ok()) << count << ": " << r.status().ToString();
    EXPECT_EQ(r->groups.size(), count >= 7 ? 2u : 0u);
    EXPECT_EQ(r->hints.kv_layout.has_value(), count >= 6);
  }
  const Frames four = Register(4);
  EXPECT_EQ(DecodeKvCacheRegistration(four.views()).status().code(), ErrorCode::kMalformedRequest);
}

TEST(GpuMessagesTest, OneBareTensorIsACrossLayerCache) {
  Frames f = Register(7);
  f.frames[1] = Encoder().Ext(1, Pickle("packed_view_devices.p4.pickle")).Take();
  const auto r = DecodeKvCacheRegistration(f.views());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->cross_layer);
  EXPECT_EQ(r->layers.size(), 1u);
}

TEST(GpuMessagesTest, BadFramesNameWhatIsWrong) {
  Frames f = Register(7);
  f.frames[1] = Encoder().Array(1).Ext(2, "x").Take();
  EXPECT_NE(DecodeKvCacheRegistration(f.views()).status().message().find("ext type 2"), std::string::npos);
  f = Register(7);
  f.frames[1] = Encoder().Array(1).Ext(1, Pickle("expandable_segments.p4.pickle")).Take();
  const auto e = DecodeKvCacheRegistration(f.views());
  EXPECT_EQ(e.status().code(), ErrorCode::kNotSupported);
  EXPECT_NE(e.status().message().find("kv_cache[0]"), std::string::npos) << e.status().ToString();
  f = Register(7);
  Encoder many;
  many.Array(65);
  for (int i = 0; i < 65; ++i) many.Map(0);
  f.frames[6] = many.Take();
  EXPECT_NE(DecodeKvCacheRegistration(f.views()).status().message().find("65 entries"), std::string::npos);
  f = Register(7);
  f.frames[6] = Encoder().Array(1).Map(1).Str("layer_indices").Str("all").Take();
  EXPECT_FALSE(DecodeKvCacheRegistration(f.views()).ok());
}

TEST(GpuMessagesTest, BlockIdsComePerGroupOrAsOneFlatList) {
  const auto grouped = DecodeBlockIds(Encoder().Array(2).Array(2).Int(1).Int(2).Array(1).Int(0).Take());
  ASSERT_TRUE(grouped.ok()) << grouped.status().ToString();
  EXPECT_EQ(*grouped, (GroupBlockIds{{1, 2}, {0}}));
  const auto flat = DecodeBlockIds(Encoder().Array(3).Int(4).Int(5).Int(6).Take());
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(*flat, (GroupBlockIds{{4, 5, 6}}));
  const auto empty = DecodeBlockIds(Encoder().Array(0).Take());
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, (GroupBlockIds{{}}));
  EXPECT_EQ(DecodeBlockIds(Encoder().Array(1).Int(std::int64_t{1} << 40).Take()).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(DecodeBlockIds(Encoder().Array(2).Array(1).Int(1).Int(2).Take()).ok()) << "mixed";
}

TEST(GpuMessagesTest, TheEventReplyIsABinOf64AndABool) {
  std::array<std::uint8_t, kEventHandleBytes> h{};
  h[0] = 9;
  const std::string reply = EncodeEventReply(h, false);
  const auto back = DecodeEventHandle(Encoder().Bin(std::string_view(reinterpret_cast<const char*>(h.data()), 64)).Take());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)[0], 9);
  EXPECT_EQ(static_cast<std::uint8_t>(reply[0]), 0x92);  // fixarray of 2
  EXPECT_EQ(static_cast<std::uint8_t>(reply.back()), 0xc2);  // false
  EXPECT_FALSE(DecodeEventHandle(Encoder().Bin("short").Take()).ok());
}

}  // namespace
}  // namespace lmcache::protocol
