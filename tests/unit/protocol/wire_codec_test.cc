#include "protocol/wire_codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/msgpack_codec.h"
#include "common/msgpack_tree.h"

namespace lmcache::protocol {
namespace {

using msgpack::type::object_type;

using Field = std::pair<std::string, std::string>;  // name, encoded value

// A msgpack map frame of `fields` in order.
std::string MapFrame(const std::vector<Field>& fields) {
  std::string frame = Encoder().Map(static_cast<std::uint32_t>(fields.size())).Take();
  for (const auto& [name, value] : fields) frame += Encoder().Str(name).Take() + value;
  return frame;
}

std::string Tokens(const std::vector<std::int64_t>& tokens) {
  Encoder e;
  e.Array(static_cast<std::uint32_t>(tokens.size()));
  for (const std::int64_t t : tokens) e.Int(t);
  return e.Take();
}

std::vector<Field> FullKeyFields() {
  return {{"model_name", Encoder().Str("llama").Take()},
          {"world_size", Encoder().Int(2).Take()},
          {"worker_id", Encoder().Int(1).Take()},
          {"token_ids", Tokens({1, 2, 3, 4294967295})},
          {"start", Encoder().Int(0).Take()},
          {"end", Encoder().Int(256).Take()},
          {"request_id", Encoder().Str("req-1").Take()},
          {"cache_salt", Encoder().Str("tenant").Take()},
          {"num_kv_readers", Encoder().Int(2).Take()}};
}

std::vector<Field> Without(std::vector<Field> fields, const std::string& name) {
  std::erase_if(fields, [&](const Field& f) { return f.first == name; });
  return fields;
}

std::vector<Field> With(std::vector<Field> fields, const std::string& name, std::string value) {
  for (auto& f : fields) {
    if (f.first == name) {
      f.second = std::move(value);
      return fields;
    }
  }
  fields.emplace_back(name, std::move(value));
  return fields;
}

void ExpectMalformedNaming(const Status& status, const std::string& field) {
  EXPECT_EQ(status.code(), ErrorCode::kMalformedRequest) << status.ToString();
  EXPECT_NE(status.message().find(field), std::string::npos) << status.message();
}

// --- DecodeIpcKey -------------------------------------------------------------------------

TEST(DecodeIpcKey, ReadsEveryField) {
  auto key = DecodeIpcKey(MapFrame(FullKeyFields()));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->model_name, "llama");
  EXPECT_EQ(key->world_size, 2);
  EXPECT_EQ(key->worker_id, std::optional<std::int64_t>(1));
  EXPECT_EQ(key->token_ids, (std::vector<std::uint32_t>{1, 2, 3, 4294967295u}));
  EXPECT_EQ(key->start, 0);
  EXPECT_EQ(key->end, 256);
  EXPECT_EQ(key->request_id, "req-1");
  EXPECT_EQ(key->cache_salt, "tenant");
  EXPECT_EQ(key->num_kv_readers, 2);
}

TEST(DecodeIpcKey, MissingOptionalFieldsTakeTheirDefaults) {
  auto key =
      DecodeIpcKey(MapFrame(Without(Without(FullKeyFields(), "cache_salt"), "num_kv_readers")));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->cache_salt, "");
  EXPECT_EQ(key->num_kv_readers, 0);
  EXPECT_EQ(key->model_name, "llama");
}

TEST(DecodeIpcKey, NilOptionalFieldsTakeTheirDefaults) {
  auto fields = With(With(FullKeyFields(), "cache_salt", Encoder().Nil().Take()), "num_kv_readers",
                     Encoder().Nil().Take());
  auto key = DecodeIpcKey(MapFrame(fields));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->cache_salt, "");
  EXPECT_EQ(key->num_kv_readers, 0);
}

TEST(DecodeIpcKey, UnknownKeysAreIgnored) {
  auto fields = FullKeyFields();
  fields.insert(fields.begin(), {"future_field", Encoder().Map(1).Str("x").Array(0).Take()});
  fields.emplace_back("another", Encoder().Bin("zz").Take());
  auto key = DecodeIpcKey(MapFrame(fields));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->request_id, "req-1");
  EXPECT_EQ(key->end, 256);
}

// request_configs as the reference's vLLM adapter forwards kv_transfer_params'
// lmcache.* settings (docs/source/mp/request_tags.rst: "lmcache.tag.<name>":
// "<value>" entries are identity, every other entry metadata).
TEST(DecodeIpcKey, RequestTagsAreTheLmcacheTagEntriesOfRequestConfigs) {
  const std::string configs = Encoder()
                                  .Map(4)
                                  .Str("lmcache.tag.tenant").Str("tenant-a")
                                  .Str("lmcache.skip_save").Bool(true)
                                  .Str("lmcache.tag.application_version").Str("v2")
                                  .Str("lmcache.retrieve_priority").Int(3)
                                  .Take();
  auto key = DecodeIpcKey(MapFrame(With(FullKeyFields(), "request_configs", configs)));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->tags, (std::map<std::string, std::string>{{"application_version", "v2"},
                                                           {"tenant", "tenant-a"}}));
  // Encoded back as request_configs, it decodes to the same tags.
  auto again = DecodeIpcKey(EncodeIpcKey(*key));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->tags, key->tags);
  // Nil and empty request_configs: no tags.
  for (const std::string& none : {Encoder().Nil().Take(), Encoder().Map(0).Take()}) {
    auto plain = DecodeIpcKey(MapFrame(With(FullKeyFields(), "request_configs", none)));
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    EXPECT_TRUE(plain->tags.empty());
  }
  // A tag whose value is no string, and a map key that is no string: named.
  ExpectMalformedNaming(
      DecodeIpcKey(MapFrame(With(FullKeyFields(), "request_configs",
                                 Encoder().Map(1).Str("lmcache.tag.tenant").Int(7).Take())))
          .status(),
      "lmcache.tag.tenant");
  ExpectMalformedNaming(DecodeIpcKey(MapFrame(With(FullKeyFields(), "request_configs",
                                                   Encoder().Map(1).Int(1).Str("x").Take())))
                            .status(),
                        "request_configs");
  auto long_value = DecodeIpcKey(MapFrame(
      With(FullKeyFields(), "request_configs",
           Encoder().Map(1).Str("lmcache.tag.t").Str(std::string(129, 'x')).Take())));
  EXPECT_EQ(long_value.status().code(), ErrorCode::kTooLarge);
}

// The reference's load controls (lmcache/v1/multiprocess/kv_load_policy.py:
// SKIP_LOAD_REQUEST_KEY, ENGINE_COMPUTED_TOKENS_HINT_KEY), with the values its
// own tests send (tests/v1/multiprocess/test_lookup_load_policy.py: the hint
// 300, skip_load true and false, next to lmcache.skip_save).
TEST(DecodeIpcKey, LoadControlsAreRequestConfigsMetadata) {
  const std::string configs = Encoder()
                                  .Map(3)
                                  .Str("lmcache.hint.engine_computed_tokens")
                                  .Int(300)
                                  .Str("lmcache.skip_save")
                                  .Bool(true)
                                  .Str("lmcache.skip_load")
                                  .Bool(true)
                                  .Take();
  auto key = DecodeIpcKey(MapFrame(With(FullKeyFields(), "request_configs", configs)));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_TRUE(key->skip_load);
  EXPECT_EQ(key->engine_computed_tokens, std::optional<std::int64_t>(300));
  EXPECT_TRUE(key->tags.empty());  // metadata, not identity
  auto again = DecodeIpcKey(EncodeIpcKey(*key));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->skip_load);
  EXPECT_EQ(again->engine_computed_tokens, key->engine_computed_tokens);
  // skip_load false, 0 and nil, and a nil hint: load as usual, no hint.
  for (const std::string& no :
       {Encoder().Bool(false).Take(), Encoder().Int(0).Take(), Encoder().Nil().Take()}) {
    auto plain = DecodeIpcKey(MapFrame(With(FullKeyFields(), "request_configs",
                                            Encoder()
                                                .Map(2)
                                                .Str("lmcache.skip_load")
                                                .Raw(no)
                                                .Str("lmcache.hint.engine_computed_tokens")
                                                .Nil()
                                                .Take())));
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    EXPECT_FALSE(plain->skip_load);
    EXPECT_FALSE(plain->engine_computed_tokens.has_value());
  }
  // Values that say nothing sure are refused, naming the entry.
  ExpectMalformedNaming(
      DecodeIpcKey(MapFrame(With(FullKeyFields(), "request_configs",
                                 Encoder().Map(1).Str("lmcache.skip_load").Str("false").Take())))
          .status(),
      "lmcache.skip_load");
  ExpectMalformedNaming(
      DecodeIpcKey(MapFrame(With(
                       FullKeyFields(), "request_configs",
                       Encoder().Map(1).Str("lmcache.hint.engine_computed_tokens").Int(-1).Take())))
          .status(),
      "engine_computed_tokens");
}

TEST(DecodeIpcKey, NilWorkerIdMeansAllRanks) {
  auto key = DecodeIpcKey(MapFrame(With(FullKeyFields(), "worker_id", Encoder().Nil().Take())));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_FALSE(key->worker_id.has_value());
}

TEST(DecodeIpcKey, IntWorkerIdIsKept) {
  auto key = DecodeIpcKey(MapFrame(With(FullKeyFields(), "worker_id", Encoder().Int(0).Take())));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->worker_id, std::optional<std::int64_t>(0));
}

TEST(DecodeIpcKey, MissingWorkerIdIsAnError) {
  auto key = DecodeIpcKey(MapFrame(Without(FullKeyFields(), "worker_id")));
  ASSERT_FALSE(key.ok());
  ExpectMalformedNaming(key.status(), "worker_id");
}

TEST(DecodeIpcKey, MissingRequiredFieldsNameTheField) {
  for (const std::string field :
       {"model_name", "world_size", "token_ids", "start", "end", "request_id"}) {
    auto key = DecodeIpcKey(MapFrame(Without(FullKeyFields(), field)));
    ASSERT_FALSE(key.ok()) << "accepted without " << field;
    ExpectMalformedNaming(key.status(), field);
  }
}

TEST(DecodeIpcKey, NegativeTokenIdIsAnError) {
  auto key = DecodeIpcKey(MapFrame(With(FullKeyFields(), "token_ids", Tokens({5, -1}))));
  ASSERT_FALSE(key.ok());
  ExpectMalformedNaming(key.status(), "key.token_ids");
}

TEST(DecodeIpcKey, TokenIdAbove32BitsIsAnError) {
  auto key = DecodeIpcKey(MapFrame(With(FullKeyFields(), "token_ids", Tokens({4294967296}))));
  ASSERT_FALSE(key.ok());
  ExpectMalformedNaming(key.status(), "key.token_ids");
}

TEST(DecodeIpcKey, NonIntegerTokenIsAnError) {
  const std::string tokens = Encoder().Array(2).Int(1).Str("2").Take();
  auto key = DecodeIpcKey(MapFrame(With(FullKeyFields(), "token_ids", tokens)));
  ASSERT_FALSE(key.ok());
  ExpectMalformedNaming(key.status(), "key.token_ids");
}

TEST(DecodeIpcKey, WrongFieldTypesNameTheField) {
  const std::vector<Field> wrong = {
      {"model_name", Encoder().Int(1).Take()},      {"world_size", Encoder().Str("2").Take()},
      {"worker_id", Encoder().Str("0").Take()},     {"token_ids", Encoder().Str("1 2 3").Take()},
      {"start", Encoder().Float(0.5).Take()},       {"end", Encoder().Array(0).Take()},
      {"request_id", Encoder().Int(7).Take()},      {"cache_salt", Encoder().Int(7).Take()},
      {"num_kv_readers", Encoder().Str("1").Take()}};
  for (const auto& [name, value] : wrong) {
    auto key = DecodeIpcKey(MapFrame(With(FullKeyFields(), name, value)));
    ASSERT_FALSE(key.ok()) << "accepted a wrong type for " << name;
    ExpectMalformedNaming(key.status(), "key." + name);
  }
}

TEST(DecodeIpcKey, BoolIsAcceptedForIntegers) {
  auto key =
      DecodeIpcKey(MapFrame(With(FullKeyFields(), "world_size", Encoder().Bool(true).Take())));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->world_size, 1);
}

TEST(DecodeIpcKey, NonMapIsMalformed) {
  auto key = DecodeIpcKey(Encoder().Array(1).Str("llama").Take());
  ASSERT_FALSE(key.ok());
  EXPECT_EQ(key.status().code(), ErrorCode::kMalformedRequest);
}

// --- DecodeEngineContext ----------------------------------------------------------------

std::vector<Field> FullContextFields() {
  return {{"instance_id", Encoder().Int(77).Take()},
          {"model_name", Encoder().Str("llama").Take()},
          {"world_size", Encoder().Int(4).Take()},
          {"block_size", Encoder().Int(16).Take()},
          {"num_layers", Encoder().Int(32).Take()},
          {"hidden_dim_size", Encoder().Int(1024).Take()},
          {"dtype_str", Encoder().Str("torch.bfloat16").Take()},
          {"use_mla", Encoder().Bool(true).Take()}};
}

TEST(DecodeEngineContext, ReadsEveryField) {
  auto fields = FullContextFields();
  fields.emplace_back("kv_caches_meta", Encoder().Array(0).Take());  // unknown: ignored
  auto p = DecodeEngineContext(MapFrame(fields));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->instance_id, 77);
  EXPECT_EQ(p->model_name, "llama");
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->block_size, 16);
  EXPECT_EQ(p->num_layers, 32);
  EXPECT_EQ(p->hidden_dim_size, 1024);
  EXPECT_EQ(p->dtype_str, "torch.bfloat16");
  EXPECT_TRUE(p->use_mla);
}

TEST(DecodeEngineContext, EveryFieldIsRequired) {
  for (const auto& [name, value] : FullContextFields()) {
    auto p = DecodeEngineContext(MapFrame(Without(FullContextFields(), name)));
    ASSERT_FALSE(p.ok()) << "accepted without " << name;
    ExpectMalformedNaming(p.status(), name);
  }
}

TEST(DecodeEngineContext, WrongTypesNameTheField) {
  auto p = DecodeEngineContext(
      MapFrame(With(FullContextFields(), "dtype_str", Encoder().Int(2).Take())));
  ASSERT_FALSE(p.ok());
  ExpectMalformedNaming(p.status(), "payload.dtype_str");
  p = DecodeEngineContext(
      MapFrame(With(FullContextFields(), "use_mla", Encoder().Str("no").Take())));
  ASSERT_FALSE(p.ok());
  ExpectMalformedNaming(p.status(), "payload.use_mla");
}

msgpack::object_handle ParseOk(const std::string& frame) {
  auto handle = msgpk::Parse(frame, "reply");
  EXPECT_TRUE(handle.ok()) << handle.status().ToString();
  return handle.ok() ? std::move(handle).value() : msgpack::object_handle();
}

TEST(EncodeErrorMap, HoldsCodeAndMessage) {
  auto h = ParseOk(EncodeErrorMap(Status(ErrorCode::kLayoutMismatch, "other geometry")));
  auto map = msgpk::MapReader::Make(h.get(), "error");
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(h.get().via.map.size, 2u);
  ASSERT_NE(map->Field("code"), nullptr);
  EXPECT_EQ(*msgpk::AsInt(*map->Field("code"), "code"), 206);
  ASSERT_NE(map->Field("message"), nullptr);
  EXPECT_EQ(*msgpk::AsString(*map->Field("message"), "message"), "other geometry");
}

// --- Scalar frames ------------------------------------------------------------------------

TEST(DecodeScalars, OptionalIntAcceptsNil) {
  auto none = DecodeOptionalInt(Encoder().Nil().Take(), "timeout");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto some = DecodeOptionalInt(Encoder().Int(-3).Take(), "timeout");
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(*some, std::optional<std::int64_t>(-3));
  auto bad = DecodeOptionalInt(Encoder().Str("3").Take(), "timeout");
  ASSERT_FALSE(bad.ok());
  ExpectMalformedNaming(bad.status(), "timeout");
}

TEST(DecodeScalars, DecodeOneValueAndRejectTrailingBytes) {
  auto r = DecodeInt(Encoder().Int(1).Int(2).Take(), "count");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_EQ(*DecodeBytes(Encoder().Bin("ab").Take(), "data"), "ab");
  EXPECT_EQ(*DecodeString(Encoder().Str("ab").Take(), "name"), "ab");
  EXPECT_EQ(*DecodeFloat(Encoder().Int(2).Take(), "ratio"), 2.0);
  EXPECT_TRUE(*DecodeBool(Encoder().Bool(true).Take(), "flag"));
}

// The server's reply for one registration's chunks encodes a slot's shared
// fields once: it must be the reply a descriptor per slot gives, byte for
// byte, for offsets of every msgpack width.
TEST(EncodePrepareStoreReply, SharedSlotFieldsGiveTheSameBytesAsOneDescriptorPerSlot) {
  const SlotDescriptor shared{999, 1024, {2, 1, 1, 256}, "bfloat16"};
  const std::vector<std::uint64_t> offsets = {0, 127, 128, 65535, 65536, (1ull << 32) + 5};
  const std::vector<std::uint64_t> indices = {0, 1, 2, 4, 300, 70000};
  PrepareStoreReply reply;
  for (const std::uint64_t offset : offsets) {
    reply.slots.push_back({offset, shared.length, shared.shape, shared.dtype});
  }
  reply.chunk_indices = indices;
  reply.oom_chunks = 3;
  const std::string shared_bytes = EncodePrepareStoreReply(shared, offsets, indices, 3);
  EXPECT_EQ(shared_bytes, EncodePrepareStoreReply(reply));
  auto decoded = DecodePrepareStoreReply(shared_bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->slots.size(), offsets.size());
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    EXPECT_EQ(decoded->slots[i].offset, offsets[i]);
    EXPECT_EQ(decoded->slots[i].length, 1024u);
    EXPECT_EQ(decoded->slots[i].shape, shared.shape);
    EXPECT_EQ(decoded->slots[i].dtype, "bfloat16");
  }
  EXPECT_EQ(decoded->chunk_indices, indices);
  EXPECT_EQ(decoded->oom_chunks, 3u);
  EXPECT_EQ(EncodePrepareStoreReply(shared, {}, {}, 0),
            EncodePrepareStoreReply(PrepareStoreReply{}));
}

}  // namespace
}  // namespace lmcache::protocol
