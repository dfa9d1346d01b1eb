// AdminOps: management operations (ping, clear, get_chunk_size, noop,
// get_experimental, report_block_allocation; ours: server_info, stats) and
// the rows of the operations this server answers "not supported" (the
// CUDA-IPC path until its family lands, QStore, CacheBlend, p2p, KV events).
//
// Thread-safety: the handlers may run on any threads at once.
#pragma once

#include <functional>
#include <string>

#include "server/op_table.h"
#include "server/service_state.h"

namespace lmcache::server {

class AdminOps {
 public:
  // `render_stats` encodes the stats reply (the service's snapshot).
  AdminOps(ServiceState* state, std::function<std::string()> render_stats)
      : state_(state), render_stats_(std::move(render_stats)) {}
  void AddTo(OpTable* table);
  // Rows of the operations that answer NOT_SUPPORTED.
  static void AddUnsupported(OpTable* table);

 private:
  Result<std::string> Ping(const RequestContext& context, std::optional<std::int64_t> instance);
  Result<std::string> Clear(const RequestContext& context, bool force);
  Result<std::string> ServerInfo() const;

  ServiceState* const state_;
  const std::function<std::string()> render_stats_;
};

// Whether `context` may run a destructive operation under `access`.
bool MayRunDestructive(AdminAccess access, const RequestContext& context);

}  // namespace lmcache::server
