// libFuzzer target: arbitrary frames sent to every operation of a real
// service (the op table's rows, their decoders and handlers) over a small
// L1 pool, from four client connections, some over remote tcp. Beyond "no
// crash, no sanitizer report, no hang": every request gets a reply frame, and
// the object table's accounting holds (what the allocator uses is what the
// table holds). The service is rebuilt every few thousand inputs so state
// accumulated by earlier inputs stays bounded. KV events are on, so stores,
// evictions and clears are recorded and poll_kv_events pages through them.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/clock.h"
#include "events/kv_events.h"
#include "fuzz_input.h"
#include "server/service.h"
#include "store/l1_cache.h"

namespace {

using namespace lmcache;

void Check(bool condition) {
  if (!condition) std::abort();
}

// The KV event channel, recording from the start and small, so the fuzzer
// reaches the recorder, the token bindings and poll_kv_events' pages.
events::KvEventsConfig SmallKvEvents() {
  events::KvEventsConfig config;
  config.log.max_events = 256;
  config.log.max_bytes = 1u << 20;
  config.token_binding_bytes = 1u << 20;
  config.record_from_start = true;
  return config;
}

struct World {
  World() : events(SmallKvEvents(), store::ChunkSizes(16)) {
    store::L1Config l1;
    l1.shm_name = "lmcache_l1_pool_fuzz_" + std::to_string(getpid());
    l1.size_bytes = 16u << 20;
    l1.prefault_threads = 1;
    l1.allocator.slab_target_bytes = 2u << 20;
    l1.evictor.interval_ms = 3'600'000;  // eviction runs on demand only
    l1.background_prefault = false;  // deterministic: every page usable at once
    cache = std::move(store::L1Cache::Create(l1, &SteadyClock::Instance())).value();
    cache->table().AddListener(&events.recorder());
    server::ServiceConfig config;
    config.chunk_sizes =
        store::ChunkSizes(16);  // small chunks: short inputs still name whole chunks
    config.sessions.max_bytes = 4u << 20;
    config.hash_cache_bytes = 1u << 20;
    config.max_pending_transfers = 256;
    service = std::make_unique<server::Service>(cache.get(), &SteadyClock::Instance(), config,
                                                nullptr, &events);
  }
  events::KvEvents events;  // outlives the table, which calls its recorder
  std::unique_ptr<store::L1Cache> cache;
  std::unique_ptr<server::Service> service;
};

void CheckBalance(server::Service& service) {
  const store::TableStats table = service.table().Stats();
  const std::uint64_t used = service.state().l1().allocator().UsedBytes();
  Check(used == table.resident_bytes + table.staging_bytes + table.retired_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::unique_ptr<World> world;
  static std::uint64_t runs = 0;
  if (!world || ++runs % 5000 == 0) {
    world.reset();
    world = std::make_unique<World>();
  }
  fuzz::FuzzRequest request;
  if (!fuzz::ParseFuzzInput(data, size, &request)) return 0;
  server::Service& service = *world->service;
  const auto& rows = service.ops().rows();
  const server::OpRow& row = rows[request.op_index % rows.size()];
  const std::string connection = "fuzz-connection-" + std::to_string(request.connection);
  server::RequestContext context;
  context.connection = connection;
  context.transport = request.remote_tcp ? server::Transport::kTcp : server::Transport::kIpc;
  context.local_peer = !request.remote_tcp;
  const server::Reply reply = service.Call(row.spec.name, request.payloads, context);
  Check(!reply.status.ok() || !reply.value.empty());
  if (runs % 64 == 0) CheckBalance(service);
  return 0;
}
