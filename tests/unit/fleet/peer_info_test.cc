// PeerInfo: the handshake's map reads back from a whole server_info reply
// (other fields around it skipped, newer fields in it ignored); a reply
// without it, with a field missing, oversized, of the wrong type or with a
// bad descriptor is refused; CheckCompatible names the field that differs.
#include "fleet/peer_info.h"

#include <gtest/gtest.h>

namespace lmcache::fleet {
namespace {

PeerInfo Sample() {
  return {.boot_id = "boot-1",
          .chunk_size = 256,
          .hash_algorithm = "blake3",
          .none_hash = std::string(32, '\x07'),
          .advertise_url = "10.0.0.1:5557",
          .key_fingerprint = "0123456789abcdef",
          .data_channel = {"worker-address", 1 << 30}};
}

// A server_info reply as AdminOps writes it: identity fields, then "p2p".
std::string Reply(const PeerInfo& info) {
  msgpk::MapWriter w;
  w.Field("version").Str("1.2.3");
  w.Field("chunk_size").Int(info.chunk_size);
  info.Encode(w.Field(kPeerInfoField));
  w.Field("features").Array(1).Str("lmcache_driven");
  return w.Take();
}

TEST(PeerInfoTest, ReadsTheHandshakeOutOfAServerInfoReply) {
  const PeerInfo sent = Sample();
  auto got = PeerInfo::FromServerInfo(Reply(sent));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->boot_id, sent.boot_id);
  EXPECT_EQ(got->chunk_size, sent.chunk_size);
  EXPECT_EQ(got->hash_algorithm, sent.hash_algorithm);
  EXPECT_EQ(got->none_hash, sent.none_hash);
  EXPECT_EQ(got->advertise_url, sent.advertise_url);
  EXPECT_EQ(got->key_fingerprint, sent.key_fingerprint);
  EXPECT_EQ(got->data_channel.worker_address, sent.data_channel.worker_address);
  EXPECT_EQ(got->data_channel.size, sent.data_channel.size);
}

TEST(PeerInfoTest, RefusesARepliesWithoutAWholeHandshake) {
  msgpk::MapWriter plain;
  plain.Field("version").Str("1.2.3");
  EXPECT_EQ(PeerInfo::FromServerInfo(plain.Take()).status().code(), ErrorCode::kNotSupported);

  // One field left out, each in turn: refused.
  for (int drop = 0; drop < 7; ++drop) {
    msgpk::Encoder e;
    e.Map(1).Str("p2p").Map(6);
    const PeerInfo s = Sample();
    if (drop != 0) e.Str("boot_id").Str(s.boot_id);
    if (drop != 1) e.Str("chunk_size").Int(s.chunk_size);
    if (drop != 2) e.Str("hash_algorithm").Str(s.hash_algorithm);
    if (drop != 3) e.Str("none_hash").Bin(s.none_hash);
    if (drop != 4) e.Str("advertise_url").Str(s.advertise_url);
    if (drop != 5) e.Str("key_fingerprint").Str(s.key_fingerprint);
    if (drop != 6) e.Str("data_channel").Bin(s.data_channel.Encode());
    EXPECT_EQ(PeerInfo::FromServerInfo(e.Take()).status().code(), ErrorCode::kMalformedRequest)
        << drop;
  }
  PeerInfo bad = Sample();
  bad.none_hash = "short";
  EXPECT_FALSE(PeerInfo::FromServerInfo(Reply(bad)).ok());
  bad = Sample();
  bad.boot_id = std::string(2000, 'b');
  EXPECT_FALSE(PeerInfo::FromServerInfo(Reply(bad)).ok());
  bad = Sample();
  bad.chunk_size = 0;
  EXPECT_FALSE(PeerInfo::FromServerInfo(Reply(bad)).ok());
  bad = Sample();
  bad.data_channel.size = 0;  // not a descriptor Parse accepts
  EXPECT_FALSE(PeerInfo::FromServerInfo(Reply(bad)).ok());
  const std::string whole = Reply(Sample());
  for (std::size_t cut = 0; cut < whole.size(); cut += 7) {
    EXPECT_FALSE(PeerInfo::FromServerInfo(whole.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(PeerInfo::FromServerInfo(whole + '\xc0').ok());
}

// Models cut otherwise (--model-chunk-size) ride in the handshake only when
// there are any; a peer's bad entries are refused.
TEST(PeerInfoTest, ModelChunkSizesRoundTripAndAreChecked) {
  PeerInfo sent = Sample();
  auto plain = PeerInfo::FromServerInfo(Reply(sent));
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->model_chunk_sizes.empty());
  sent.model_chunk_sizes = {{"zai-org/GLM-5.3-Flash", 640}, {"mla", 384}};
  auto got = PeerInfo::FromServerInfo(Reply(sent));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->model_chunk_sizes, sent.model_chunk_sizes);
  EXPECT_EQ(got->chunk_sizes(), store::ChunkSizes(256, sent.model_chunk_sizes));
  for (const auto& bad : std::vector<store::ChunkSizes::Overrides>{
           {{"m", 0}}, {{"m", std::int64_t{1} << 21}}, {{"a@b", 640}}, {{"", 640}}}) {
    PeerInfo wrong = Sample();
    wrong.model_chunk_sizes = bad;
    EXPECT_EQ(PeerInfo::FromServerInfo(Reply(wrong)).status().code(), ErrorCode::kMalformedRequest)
        << bad.begin()->first;
  }
  PeerInfo many = Sample();
  for (int i = 0; i < 1025; ++i) many.model_chunk_sizes["m" + std::to_string(i)] = 640;
  EXPECT_FALSE(PeerInfo::FromServerInfo(Reply(many)).ok());
}

// Per model: a peer that agrees on some model is admitted, and asked only
// for the models it cuts as we do; one that agrees on none is excluded.
TEST(PeerInfoTest, ChunkSizesAgreePerModel) {
  const ChunkAgreement same{store::ChunkSizes(256, {{"a", 640}}),
                            store::ChunkSizes(256, {{"a", 640}})};
  EXPECT_TRUE(same.Agrees("a") && same.Agrees("b"));
  EXPECT_EQ(same.Differences(), "");

  const ChunkAgreement one_apart{store::ChunkSizes(256, {{"a", 640}, {"b", 256 * 2}}),
                                 store::ChunkSizes(256, {{"a", 640}})};
  EXPECT_TRUE(one_apart.Agrees("a"));
  EXPECT_FALSE(one_apart.Agrees("b"));
  EXPECT_TRUE(one_apart.Agrees("c"));
  EXPECT_TRUE(one_apart.AgreesOnAny());
  EXPECT_EQ(one_apart.Differences(), "b: 512 here, 256 there");

  const ChunkAgreement defaults_apart{store::ChunkSizes(256, {{"a", 640}}),
                                      store::ChunkSizes(512, {{"a", 640}})};
  EXPECT_TRUE(defaults_apart.Agrees("a"));
  EXPECT_FALSE(defaults_apart.Agrees("c"));
  EXPECT_TRUE(defaults_apart.AgreesOnAny());
  EXPECT_EQ(defaults_apart.Differences(), "every other model: 256 here, 512 there");

  PeerInfo ours = Sample();
  PeerInfo theirs = Sample();
  ours.model_chunk_sizes = {{"a", 640}};
  theirs.chunk_size = 512;
  theirs.model_chunk_sizes = {{"a", 640}};
  EXPECT_TRUE(CheckCompatible(ours, theirs).ok());  // shares model a
  theirs.model_chunk_sizes = {{"a", 1280}};
  const Status none = CheckCompatible(ours, theirs);
  EXPECT_EQ(none.code(), ErrorCode::kLayoutMismatch);
  EXPECT_NE(none.message().find("chunk size is 512 (a=1280) tokens, ours is 256 (a=640) tokens"),
            std::string::npos)
      << none.message();
}

TEST(PeerInfoTest, CompatibilityNamesTheFieldThatDiffers) {
  const PeerInfo ours = Sample();
  PeerInfo theirs = Sample();
  theirs.boot_id = "another life";
  theirs.advertise_url = "10.0.0.2:5557";
  theirs.data_channel = {"another worker", 1 << 20};
  EXPECT_TRUE(CheckCompatible(ours, theirs).ok());

  theirs = Sample();
  theirs.chunk_size = 512;
  Status st = CheckCompatible(ours, theirs);
  EXPECT_EQ(st.code(), ErrorCode::kLayoutMismatch);
  EXPECT_NE(st.message().find("chunk size is 512 tokens, ours is 256 tokens"), std::string::npos)
      << st.message();

  theirs = Sample();
  theirs.hash_algorithm = "sha256_cbor";
  EXPECT_NE(CheckCompatible(ours, theirs).message().find("hash algorithm is sha256_cbor"),
            std::string::npos);

  theirs = Sample();
  theirs.none_hash = std::string(32, '\0');
  EXPECT_NE(CheckCompatible(ours, theirs).message().find("NONE_HASH is 0000"), std::string::npos);

  theirs = Sample();
  theirs.key_fingerprint = "fedcba9876543210";
  EXPECT_NE(CheckCompatible(ours, theirs).message().find("fleet key fingerprint"),
            std::string::npos);
}

TEST(PeerInfoTest, AHelloReadsBackAndAMalformedOneIsRefused) {
  const PeerHello sent{"10.0.0.1:5557", "boot-1"};
  auto got = PeerHello::Decode(sent.Encode());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->advertise_url, sent.advertise_url);
  EXPECT_EQ(got->boot_id, sent.boot_id);
  // A newer member's field is skipped.
  msgpk::MapWriter newer;
  newer.Field("boot_id").Str("b");
  newer.Field("lmc_future").Int(1);
  newer.Field("advertise_url").Str("u");
  EXPECT_TRUE(PeerHello::Decode(newer.Take()).ok());
  EXPECT_FALSE(PeerHello::Decode(PeerHello{"", "boot-1"}.Encode()).ok());
  EXPECT_FALSE(PeerHello::Decode(PeerHello{"u", std::string(1025, 'b')}.Encode()).ok());
  EXPECT_FALSE(PeerHello::Decode(sent.Encode() + "x").ok());
  EXPECT_FALSE(PeerHello::Decode(msgpk::Encoder().Str("boot-1").Take()).ok());
}

}  // namespace
}  // namespace lmcache::fleet
