// ServiceHarness: an in-process Service over a small real L1 pool, driven
// with a fake clock, plus helpers that build payload frames and read replies.
// Thread-safety: one test thread (Call itself may be used from several).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/msgpack_codec.h"
#include "common/msgpack_tree.h"
#include "events/kv_events.h"
#include "fleet/chunk_log.h"
#include "fakes/fake_clock.h"
#include "protocol/wire_codec.h"
#include "server/service.h"
#include "store/l1_cache.h"

namespace lmcache::testing {

struct KeyArgs {
  std::vector<std::uint32_t> tokens;
  std::int64_t start = 0;
  std::int64_t end = 0;
  std::optional<std::int64_t> worker_id = 0;
  std::string request_id = "req";
  std::string model = "model";
  std::int64_t world_size = 1;
  std::int64_t readers = 1;
  std::string salt;
  std::map<std::string, std::string> tags;  // request tags (lmcache.tag.*)
  bool skip_load = false;                   // lmcache.skip_load
  std::optional<std::int64_t> engine_computed_tokens;  // lmcache.hint.engine_computed_tokens
};

inline std::vector<std::uint32_t> Tokens(std::size_t count, std::uint32_t seed = 1) {
  std::vector<std::uint32_t> tokens(count);
  for (std::size_t i = 0; i < count; ++i)
    tokens[i] = seed * 100'003u + static_cast<std::uint32_t>(i);
  return tokens;
}

inline IpcKey ToIpcKey(const KeyArgs& k) {
  IpcKey key;
  key.model_name = k.model;
  key.world_size = k.world_size;
  key.worker_id = k.worker_id;
  key.token_ids = k.tokens;
  key.start = k.start;
  key.end = k.end;
  key.request_id = k.request_id;
  key.cache_salt = k.salt;
  key.num_kv_readers = k.readers;
  key.tags = k.tags;
  key.skip_load = k.skip_load;
  key.engine_computed_tokens = k.engine_computed_tokens;
  return key;
}

inline std::string KeyFrame(const KeyArgs& k) { return protocol::EncodeIpcKey(ToIpcKey(k)); }

inline std::string IntFrame(std::int64_t v) { return msgpk::Encoder().Int(v).Take(); }
inline std::string StrFrame(std::string_view v) { return msgpk::Encoder().Str(v).Take(); }

inline std::string RegisterFrame(std::int64_t instance, const std::string& model = "model",
                                 std::int64_t world_size = 1, std::int64_t layers = 2,
                                 std::int64_t hidden = 64, const std::string& dtype = "bfloat16") {
  EngineContext c;
  c.instance_id = instance;
  c.model_name = model;
  c.world_size = world_size;
  c.block_size = 16;
  c.num_layers = layers;
  c.hidden_dim_size = hidden;
  c.dtype_str = dtype;
  c.use_mla = false;
  return protocol::EncodeEngineContext(c);
}

class ServiceHarness {
 public:
  explicit ServiceHarness(std::uint64_t pool_bytes = 64ull << 20, server::ServiceConfig config = {},
                          bool on_demand_eviction = true, tier::Prefetcher* prefetcher = nullptr,
                          std::unique_ptr<store::EvictionPolicy> policy = nullptr,
                          const std::function<void(store::L1Config&)>& tune_l1 = nullptr,
                          events::KvEvents* events = nullptr,
                          fleet::ChunkLog* chunk_log = nullptr) {
    store::L1Config l1;
    l1.shm_name =
        "lmcache_l1_pool_svc_test_" + std::to_string(getpid()) + "_" + std::to_string(counter_++);
    l1.size_bytes = pool_bytes;
    l1.prefault_threads = 1;
    l1.allocator.slab_target_bytes = 2ull << 20;
    l1.table.on_demand_eviction = on_demand_eviction;
    // No background passes: tests evict explicitly (or on demand), never by timing.
    l1.background_eviction = false;
    l1.background_prefault = false;  // every page usable when the test starts
    if (tune_l1) tune_l1(l1);
    cache_ = std::move(store::L1Cache::Create(l1, &clock_, std::move(policy))).value();
    // As main: the recorder listens before anything is stored. `events`
    // outlives the harness.
    if (events != nullptr) cache_->table().AddListener(&events->recorder());
    if (chunk_log != nullptr) cache_->table().AddListener(chunk_log);
    service_ = std::make_unique<server::Service>(cache_.get(), &clock_, config, prefetcher, events,
                                                 chunk_log);
  }

  // Runs `op` (a name) as sent from `connection` (over ipc) and returns the
  // reply; `fleet_member`: as over the fleet endpoint (the key proved).
  server::Reply CallAs(std::string_view connection, std::string_view op,
                       std::vector<std::string> frames,
                       server::Transport transport = server::Transport::kIpc,
                       bool fleet_member = false) {
    std::vector<std::string_view> views(frames.begin(), frames.end());
    server::RequestContext context;
    context.connection = connection;
    context.transport = transport;
    context.local_peer = transport != server::Transport::kTcp;
    context.fleet_member = fleet_member;
    return service_->Call(op, views, context);
  }
  // Runs `op` (a name) from the harness's default connection.
  server::Reply Call(std::string_view op, std::vector<std::string> frames) {
    return CallAs("test-connection", op, std::move(frames));
  }
  // The reply value of a call that must succeed, parsed.
  msgpack::object_handle Ok(std::string_view op, std::vector<std::string> frames) {
    server::Reply reply = Call(op, std::move(frames));
    if (!reply.status.ok()) {
      ADD_FAILURE() << op << " failed: " << reply.status.ToString();
      return msgpack::object_handle();
    }
    return std::move(msgpk::Parse(reply.value, op)).value();
  }

  server::Service& service() { return *service_; }
  store::L1Cache& l1() { return *cache_; }
  FakeClock& clock() { return clock_; }
  std::byte* pool() { return cache_->segment().base(); }

 private:
  static inline int counter_ = 0;
  FakeClock clock_;
  std::unique_ptr<store::L1Cache> cache_;
  std::unique_ptr<server::Service> service_;
};

// The field `name` of a reply map (a test failure, and nil, when it is missing).
inline const msgpack::object& Field(const msgpack::object& map, std::string_view name) {
  static const msgpack::object kNil;
  auto reader = msgpk::MapReader::Make(map, "reply");
  if (!reader.ok() || reader->Field(name) == nullptr) {
    ADD_FAILURE() << "no field " << name;
    return kNil;
  }
  return *reader->Field(name);
}

// The slot offsets of a prepare_store / prepare_retrieve reply's context.
inline std::vector<std::uint64_t> SlotOffsets(const msgpack::object& context) {
  std::vector<std::uint64_t> out;
  const msgpack::object& slots = Field(context, "slots");
  for (std::uint32_t i = 0; i < slots.via.array.size; ++i) {
    out.push_back(Field(slots.via.array.ptr[i], "offset").via.u64);
  }
  return out;
}

}  // namespace lmcache::testing
