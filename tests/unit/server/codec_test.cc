#include "server/codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lmcache::server {
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

// --- DecodeOperation ----------------------------------------------------------------------

TEST(DecodeOperation, EveryFrozenIdDecodes) {
  for (std::int64_t id = 1; id <= 34; ++id) {
    auto spec = DecodeOperation(Encoder().Int(id).Take());
    ASSERT_TRUE(spec.ok()) << "id " << id << ": " << spec.status().ToString();
    EXPECT_EQ(static_cast<std::int64_t>(spec->op), id);
    EXPECT_TRUE(spec->frozen_id);
  }
  EXPECT_EQ(DecodeOperation(Encoder().Int(16).Take())->op, Op::kPrepareStore);
}

TEST(DecodeOperation, IdsOutsideTheFrozenTableAreUnknown) {
  for (const std::int64_t id : {0, 35, 99, -1, 100, 101}) {
    auto spec = DecodeOperation(Encoder().Int(id).Take());
    ASSERT_FALSE(spec.ok()) << "id " << id << " decoded";
    EXPECT_EQ(spec.status().code(), ErrorCode::kUnknownOperation) << id;
  }
}

TEST(DecodeOperation, IdsAboveInt64MaxAreUnknown) {
  // 2^63 + 1 must not alias a valid id (e.g. 1) by dropping its top bit.
  for (const std::uint64_t id :
       {(std::uint64_t{1} << 63) + 1, (std::uint64_t{1} << 63) + 16, ~std::uint64_t{0}}) {
    auto spec = DecodeOperation(Encoder().Uint(id).Take());
    ASSERT_FALSE(spec.ok()) << "id " << id << " decoded as " << (spec.ok() ? spec->name : "");
    EXPECT_EQ(spec.status().code(), ErrorCode::kUnknownOperation) << id;
  }
}

TEST(DecodeOperation, ByName) {
  auto prepare = DecodeOperation(Encoder().Str("prepare_store").Take());
  ASSERT_TRUE(prepare.ok()) << prepare.status().ToString();
  EXPECT_EQ(prepare->op, Op::kPrepareStore);
  auto info = DecodeOperation(Encoder().Str("server_info").Take());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->op, Op::kServerInfo);
  EXPECT_FALSE(info->frozen_id);
}

TEST(DecodeOperation, FinishReadIsCommitRetrieve) {
  auto spec = DecodeOperation(Encoder().Str("finish_read").Take());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->op, Op::kCommitRetrieve);
  EXPECT_EQ(spec->name, "commit_retrieve");
}

TEST(DecodeOperation, UnknownNameIsUnknownOperationNamingIt) {
  auto spec = DecodeOperation(Encoder().Str("teleport").Take());
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), ErrorCode::kUnknownOperation);
  EXPECT_NE(spec.status().message().find("teleport"), std::string::npos);
}

TEST(DecodeOperation, WrongTypesAreMalformed) {
  for (const std::string& frame :
       {Encoder().Map(1).Str("op").Int(1).Take(), Encoder().Float(1.5).Take(),
        Encoder().Bool(true).Take(), Encoder().Nil().Take(), std::string()}) {
    auto spec = DecodeOperation(frame);
    ASSERT_FALSE(spec.ok()) << "decoded " << spec->name << " from a frame starting 0x" << std::hex
                            << (frame.empty()
                                    ? -1
                                    : static_cast<int>(static_cast<std::uint8_t>(frame[0])));
    EXPECT_EQ(spec.status().code(), ErrorCode::kMalformedRequest) << spec.status().ToString();
  }
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

// --- DecodeRegisterContext ----------------------------------------------------------------

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

TEST(DecodeRegisterContext, ReadsEveryField) {
  auto fields = FullContextFields();
  fields.emplace_back("kv_caches_meta", Encoder().Array(0).Take());  // unknown: ignored
  auto p = DecodeRegisterContext(MapFrame(fields));
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

TEST(DecodeRegisterContext, EveryFieldIsRequired) {
  for (const auto& [name, value] : FullContextFields()) {
    auto p = DecodeRegisterContext(MapFrame(Without(FullContextFields(), name)));
    ASSERT_FALSE(p.ok()) << "accepted without " << name;
    ExpectMalformedNaming(p.status(), name);
  }
}

TEST(DecodeRegisterContext, WrongTypesNameTheField) {
  auto p = DecodeRegisterContext(
      MapFrame(With(FullContextFields(), "dtype_str", Encoder().Int(2).Take())));
  ASSERT_FALSE(p.ok());
  ExpectMalformedNaming(p.status(), "payload.dtype_str");
  p = DecodeRegisterContext(
      MapFrame(With(FullContextFields(), "use_mla", Encoder().Str("no").Take())));
  ASSERT_FALSE(p.ok());
  ExpectMalformedNaming(p.status(), "payload.use_mla");
}

// --- Failure values and error maps --------------------------------------------------------

msgpack::object_handle ParseOk(const std::string& frame) {
  auto handle = mp::Parse(frame, "reply");
  EXPECT_TRUE(handle.ok()) << handle.status().ToString();
  return handle.ok() ? std::move(handle).value() : msgpack::object_handle();
}

TEST(EncodeFailureValue, ScalarValues) {
  EXPECT_EQ(ParseOk(EncodeFailureValue(FailureValue::kNil, "x")).get().type, object_type::NIL);
  auto f = ParseOk(EncodeFailureValue(FailureValue::kFalse, "x"));
  ASSERT_EQ(f.get().type, object_type::BOOLEAN);
  EXPECT_FALSE(f.get().via.boolean);
  auto zero = ParseOk(EncodeFailureValue(FailureValue::kZero, "x"));
  ASSERT_EQ(zero.get().type, object_type::POSITIVE_INTEGER);
  EXPECT_EQ(zero.get().via.u64, 0u);
  auto list = ParseOk(EncodeFailureValue(FailureValue::kEmptyList, "x"));
  ASSERT_EQ(list.get().type, object_type::ARRAY);
  EXPECT_EQ(list.get().via.array.size, 0u);
}

TEST(EncodeFailureValue, StoreRetrieveFailureIsEmptyBytesAndFalse) {
  auto h = ParseOk(EncodeFailureValue(FailureValue::kStoreRetrieveFailure, "x"));
  ASSERT_EQ(h.get().type, object_type::ARRAY);
  ASSERT_EQ(h.get().via.array.size, 2u);
  EXPECT_EQ(h.get().via.array.ptr[0].type, object_type::BIN);
  EXPECT_EQ(h.get().via.array.ptr[0].via.bin.size, 0u);
  ASSERT_EQ(h.get().via.array.ptr[1].type, object_type::BOOLEAN);
  EXPECT_FALSE(h.get().via.array.ptr[1].via.boolean);
}

TEST(EncodeFailureValue, EmptyPrepareStoreHasEmptySlotsAndChunkIndices) {
  auto h = ParseOk(EncodeFailureValue(FailureValue::kEmptyPrepareStore, "x"));
  auto map = mp::MapReader::Make(h.get(), "reply");
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(h.get().via.map.size, 1u);
  const msgpack::object* context = map->Field("context");
  ASSERT_NE(context, nullptr);
  auto inner = mp::MapReader::Make(*context, "context");
  ASSERT_TRUE(inner.ok());
  EXPECT_EQ(context->via.map.size, 2u);
  for (const char* name : {"slots", "chunk_indices"}) {
    const msgpack::object* list = inner->Field(name);
    ASSERT_NE(list, nullptr) << name;
    ASSERT_EQ(list->type, object_type::ARRAY) << name;
    EXPECT_EQ(list->via.array.size, 0u) << name;
  }
}

TEST(EncodeFailureValue, FailedPrepareRetrieve) {
  auto h = ParseOk(EncodeFailureValue(FailureValue::kFailedPrepareRetrieve, "x"));
  auto map = mp::MapReader::Make(h.get(), "reply");
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(h.get().via.map.size, 3u);
  ASSERT_NE(map->Field("success"), nullptr);
  ASSERT_EQ(map->Field("success")->type, object_type::BOOLEAN);
  EXPECT_FALSE(map->Field("success")->via.boolean);
  ASSERT_NE(map->Field("data"), nullptr);
  ASSERT_EQ(map->Field("data")->type, object_type::BIN);
  EXPECT_EQ(map->Field("data")->via.bin.size, 0u);
  ASSERT_NE(map->Field("context"), nullptr);
  ASSERT_EQ(map->Field("context")->type, object_type::MAP);
  EXPECT_EQ(map->Field("context")->via.map.size, 0u);
}

TEST(EncodeFailureValue, FailedRegistrationCarriesTheMessage) {
  auto h = ParseOk(EncodeFailureValue(FailureValue::kFailedRegistration, "layout mismatch"));
  auto map = mp::MapReader::Make(h.get(), "reply");
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(h.get().via.map.size, 3u);
  ASSERT_NE(map->Field("shm_name"), nullptr);
  EXPECT_EQ(*mp::AsString(*map->Field("shm_name"), "shm_name"), "");
  ASSERT_NE(map->Field("pool_size"), nullptr);
  ASSERT_EQ(map->Field("pool_size")->type, object_type::POSITIVE_INTEGER);
  EXPECT_EQ(map->Field("pool_size")->via.u64, 0u);
  ASSERT_NE(map->Field("error"), nullptr);
  EXPECT_EQ(*mp::AsString(*map->Field("error"), "error"), "layout mismatch");
}

TEST(EncodeErrorMap, HoldsCodeAndMessage) {
  auto h = ParseOk(EncodeErrorMap(Status(ErrorCode::kLayoutMismatch, "other geometry")));
  auto map = mp::MapReader::Make(h.get(), "error");
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(h.get().via.map.size, 2u);
  ASSERT_NE(map->Field("code"), nullptr);
  EXPECT_EQ(*mp::AsInt(*map->Field("code"), "code"), 206);
  ASSERT_NE(map->Field("message"), nullptr);
  EXPECT_EQ(*mp::AsString(*map->Field("message"), "message"), "other geometry");
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

}  // namespace
}  // namespace lmcache::server
