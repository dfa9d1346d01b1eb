// OpTable: resolving operation frames, the rows the service registers (the
// reference's frozen table), failure values of each declared reply type, Bind.
#include "server/op_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fakes/service_harness.h"

namespace lmcache::server {
namespace {

using msgpack::type::object_type;

using msgpk::Encoder;

// The rows of a real service: the whole protocol as served.
const OpTable& ServiceOps() {
  static testing::ServiceHarness harness;
  return harness.service().ops();
}

Result<OpSpec> DecodeOperation(const std::string& frame) {
  LMC_ASSIGN_OR_RETURN(const OpRow* row, ServiceOps().Resolve(frame));
  return row->spec;
}

std::string EncodeFailureValue(FailureValue failure, const std::string& message) {
  const OpSpec spec{Op::kNoop, "test", false, Pool::kInline, 0, 0, 0, failure};
  return server::EncodeFailureValue(spec, Status(ErrorCode::kInternal, message));
}

// --- Resolving operation frames -----------------------------------------------------------

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

// --- Failure values --------------------------------------------------------

msgpack::object_handle ParseOk(const std::string& frame) {
  auto handle = msgpk::Parse(frame, "reply");
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

TEST(EncodeFailureValue, EventFailureIsEmptyBytesAndFalse) {
  auto h = ParseOk(EncodeFailureValue(FailureValue::kEventFailure, "x"));
  ASSERT_EQ(h.get().type, object_type::ARRAY);
  ASSERT_EQ(h.get().via.array.size, 2u);
  EXPECT_EQ(h.get().via.array.ptr[0].type, object_type::BIN);
  EXPECT_EQ(h.get().via.array.ptr[0].via.bin.size, 0u);
  ASSERT_EQ(h.get().via.array.ptr[1].type, object_type::BOOLEAN);
  EXPECT_FALSE(h.get().via.array.ptr[1].via.boolean);
}

TEST(EncodeFailureValue, EmptyPrepareStoreHasEmptySlotsAndChunkIndices) {
  auto h = ParseOk(EncodeFailureValue(FailureValue::kEmptyPrepareStore, "x"));
  auto map = msgpk::MapReader::Make(h.get(), "reply");
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(h.get().via.map.size, 1u);
  const msgpack::object* context = map->Field("context");
  ASSERT_NE(context, nullptr);
  auto inner = msgpk::MapReader::Make(*context, "context");
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
  auto map = msgpk::MapReader::Make(h.get(), "reply");
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
  auto map = msgpk::MapReader::Make(h.get(), "reply");
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(h.get().via.map.size, 3u);
  ASSERT_NE(map->Field("shm_name"), nullptr);
  EXPECT_EQ(*msgpk::AsString(*map->Field("shm_name"), "shm_name"), "");
  ASSERT_NE(map->Field("pool_size"), nullptr);
  ASSERT_EQ(map->Field("pool_size")->type, object_type::POSITIVE_INTEGER);
  EXPECT_EQ(map->Field("pool_size")->via.u64, 0u);
  ASSERT_NE(map->Field("error"), nullptr);
  EXPECT_EQ(*msgpk::AsString(*map->Field("error"), "error"), "layout mismatch");
}

// --- The table as the reference defines it -----------------------------------------------

TEST(OpTable, EveryFrozenIdHasItsReferenceName) {
  // Spec 2.4, the frozen table of transport/zmq_impl/wire.py.
  const char* kNames[] = {"register_kv_cache",
                          "unregister_kv_cache",
                          "register_q_cache",
                          "unregister_q_cache",
                          "store_q",
                          "store",
                          "retrieve",
                          "lookup",
                          "query_prefetch_status",
                          "wait_prefetch_status",
                          "query_prefetch_lookup_hits",
                          "free_lookup_locks",
                          "end_session",
                          "register_kv_cache_engine_driven_context",
                          "unregister_kv_cache_engine_driven_context",
                          "prepare_store",
                          "commit_store",
                          "prepare_retrieve",
                          "commit_retrieve",
                          "clear",
                          "get_chunk_size",
                          "ping",
                          "report_block_allocation",
                          "noop",
                          "cb_register_rope",
                          "cb_unregister_rope",
                          "cb_retrieve_pre_computed",
                          "cb_unified_lookup",
                          "p2p_lookup_and_lock",
                          "p2p_query_lookup_results",
                          "p2p_unlock_objects",
                          "get_experimental",
                          "cb_protocol_handshake",
                          "poll_kv_events"};
  for (std::int64_t id = 1; id <= 34; ++id) {
    const OpRow* row = ServiceOps().FindById(id);
    ASSERT_NE(row, nullptr) << id;
    EXPECT_EQ(row->spec.name, kNames[id - 1]) << id;
    EXPECT_EQ(ServiceOps().FindByName(kNames[id - 1]), row);
  }
  // + server_info, stats, clear_cache, p2p_hello, p2p_end_task, p2p_unlock_task,
  // p2p_chunk_events, p2p_chunk_listing (ours), store_with_chunk_events,
  // release_chunk_store_events, subscribe_kv_events, abort_store (the reference's,
  // by name only).
  EXPECT_EQ(ServiceOps().rows().size(), 46u);
  for (const char* name : {"p2p_chunk_events", "p2p_chunk_listing"}) {
    ASSERT_NE(ServiceOps().FindByName(name), nullptr) << name;
    EXPECT_FALSE(ServiceOps().FindByName(name)->spec.frozen_id) << name;
  }
  ASSERT_NE(ServiceOps().FindByName("p2p_end_task"), nullptr);
  ASSERT_NE(ServiceOps().FindByName("p2p_unlock_task"), nullptr);
  ASSERT_NE(ServiceOps().FindByName("p2p_hello"), nullptr);
  EXPECT_EQ(ServiceOps().FindByName("p2p_hello")->spec.frozen_id, false);
  ASSERT_NE(ServiceOps().FindByName("clear_cache"), nullptr);
  EXPECT_EQ(ServiceOps().FindByName("clear_cache")->spec.frozen_id, false);
}

// What a reference client decodes frame 3 of each operation as (its declared
// response types, lmcache/v1/multiprocess/transport/base.py): the failure
// value must decode as that type, or the client waits out its timeout.
enum class Declared { kNone, kBool, kInt, kIntOrNone, kStr, kListOrNone, kList, kBytesBool,
                      kIntBool, kMap, kBytesListBool };

void ExpectDecodesAs(const msgpack::object& o, Declared type, std::string_view op) {
  switch (type) {
    case Declared::kNone: EXPECT_EQ(o.type, object_type::NIL) << op; break;
    case Declared::kBool: EXPECT_EQ(o.type, object_type::BOOLEAN) << op; break;
    case Declared::kInt: EXPECT_EQ(o.type, object_type::POSITIVE_INTEGER) << op; break;
    case Declared::kIntOrNone:
      EXPECT_TRUE(o.type == object_type::NIL || o.type == object_type::POSITIVE_INTEGER) << op;
      break;
    case Declared::kStr: EXPECT_EQ(o.type, object_type::STR) << op; break;
    case Declared::kList: EXPECT_EQ(o.type, object_type::ARRAY) << op; break;
    case Declared::kListOrNone:
      EXPECT_TRUE(o.type == object_type::NIL || o.type == object_type::ARRAY) << op;
      break;
    case Declared::kBytesBool:
      ASSERT_EQ(o.type, object_type::ARRAY) << op;
      ASSERT_EQ(o.via.array.size, 2u) << op;
      EXPECT_EQ(o.via.array.ptr[0].type, object_type::BIN) << op;
      EXPECT_EQ(o.via.array.ptr[1].type, object_type::BOOLEAN) << op;
      break;
    case Declared::kIntBool:
      ASSERT_EQ(o.type, object_type::ARRAY) << op;
      ASSERT_EQ(o.via.array.size, 2u) << op;
      EXPECT_EQ(o.via.array.ptr[0].type, object_type::POSITIVE_INTEGER) << op;
      EXPECT_EQ(o.via.array.ptr[1].type, object_type::BOOLEAN) << op;
      break;
    case Declared::kMap: EXPECT_EQ(o.type, object_type::MAP) << op; break;
    case Declared::kBytesListBool:  // msgspec decodes a tuple only at its exact length
      ASSERT_EQ(o.type, object_type::ARRAY) << op;
      ASSERT_EQ(o.via.array.size, 3u) << op;
      EXPECT_EQ(o.via.array.ptr[0].type, object_type::BIN) << op;
      EXPECT_EQ(o.via.array.ptr[1].type, object_type::ARRAY) << op;
      EXPECT_EQ(o.via.array.ptr[2].type, object_type::BOOLEAN) << op;
      break;
  }
}

TEST(OpTable, EveryFailureValueDecodesAsTheDeclaredReplyType) {
  using D = Declared;
  const std::pair<const char*, Declared> kDeclared[] = {
      {"register_kv_cache", D::kNone},          {"unregister_kv_cache", D::kNone},
      {"register_q_cache", D::kNone},           {"unregister_q_cache", D::kNone},
      {"store_q", D::kBytesBool},               {"store", D::kBytesBool},
      {"retrieve", D::kBytesBool},              {"lookup", D::kNone},
      {"query_prefetch_status", D::kIntOrNone}, {"wait_prefetch_status", D::kIntOrNone},
      {"query_prefetch_lookup_hits", D::kIntOrNone},
      {"free_lookup_locks", D::kNone},          {"end_session", D::kNone},
      {"register_kv_cache_engine_driven_context", D::kMap},
      {"unregister_kv_cache_engine_driven_context", D::kNone},
      {"prepare_store", D::kMap},               {"commit_store", D::kBool},
      {"prepare_retrieve", D::kMap},            {"commit_retrieve", D::kBool},
      {"clear", D::kNone},                      {"get_chunk_size", D::kInt},
      {"ping", D::kBool},                       {"report_block_allocation", D::kNone},
      {"noop", D::kStr},                        {"cb_register_rope", D::kNone},
      {"cb_unregister_rope", D::kNone},         {"cb_retrieve_pre_computed", D::kBytesBool},
      {"cb_unified_lookup", D::kNone},          {"p2p_lookup_and_lock", D::kInt},
      {"p2p_query_lookup_results", D::kListOrNone},
      {"p2p_unlock_objects", D::kNone},         {"get_experimental", D::kList},
      {"cb_protocol_handshake", D::kIntBool},   {"poll_kv_events", D::kMap},
      // Sent by name by newer clients (LMCache transport/base.py, RequestClient's
      // @rpc_method annotations; the chunk-store module's
      // tuple[bytes, list[tuple[bytes, int, int]], bool], modules/chunk_store.py).
      {"store_with_chunk_events", D::kBytesListBool},
      {"release_chunk_store_events", D::kNone}, {"subscribe_kv_events", D::kNone},
      {"abort_store", D::kBool},  // adapter_connector/shm.py: bool(future.result())
  };
  for (const auto& [name, declared] : kDeclared) {
    const OpRow* row = ServiceOps().FindByName(name);
    ASSERT_NE(row, nullptr) << name;
    auto value = ParseOk(server::EncodeFailureValue(row->spec, Status(ErrorCode::kInternal, "x")));
    ExpectDecodesAs(value.get(), declared, name);
  }
}

TEST(OpTable, PollKvEventsFailureIsADisabledEventStream) {
  auto h = ParseOk(EncodeFailureValue(FailureValue::kKvEventsDisabled, "x"));
  auto map = msgpk::MapReader::Make(h.get(), "reply");
  ASSERT_TRUE(map.ok());
  for (const char* field : {"enabled", "incarnation", "next_cursor", "lost", "events"}) {
    EXPECT_NE(map->Field(field), nullptr) << field;
  }
  EXPECT_FALSE(map->Field("enabled")->via.boolean);
}

TEST(OpTable, BindPassesDecodedArgumentsAndDecoderErrors) {
  OpTable table;
  auto decode = [](Payloads p) -> Result<std::int64_t> {
    return protocol::DecodeInt(p[0], "n");
  };
  table.Add({Op::kNoop, "double", false, Pool::kInline, 1, 1, 64, FailureValue::kZero},
            Bind(decode, [](const RequestContext&, std::int64_t n) -> Result<std::string> {
              return Encoder().Int(2 * n).Take();
            }));
  const OpRow* row = table.FindByName("double");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->index, 0u);
  EXPECT_EQ(table.FindById(24), nullptr);  // added as not frozen: reachable by name only
  OpResult answer = Status(ErrorCode::kInternal, "no answer");
  const std::string good = Encoder().Int(21).Take();
  std::vector<std::string_view> payloads{good};
  row->handle({}, payloads, [&](OpResult r) { answer = std::move(r); });
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer.value(), Encoder().Int(42).Take());
  const std::string bad = Encoder().Str("x").Take();
  payloads = {bad};
  row->handle({}, payloads, [&](OpResult r) { answer = std::move(r); });
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_FALSE(answer.failure_value().has_value()) << "the operation's declared failure value";
}

TEST(OpTable, AHandlerMayAnswerAFailureWithItsOwnValue) {
  // A failed store of a registered worker answers a real event, not b"".
  const OpResult failed = OpResult::Failure(Status(ErrorCode::kNotFound, "gone"), "frame 3");
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(failed.failure_value(), "frame 3");
}

}  // namespace
}  // namespace lmcache::server
