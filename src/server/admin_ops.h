// AdminOps: management operations (ping, clear, get_chunk_size, noop,
// get_experimental, report_block_allocation; ours: server_info, stats) and
// the rows of the operations this server answers "not supported" (QStore,
// CacheBlend, p2p, KV events).
//
// Thread-safety: the handlers may run on any threads at once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/op_table.h"
#include "server/service_state.h"

namespace lmcache::server {

class AdminOps {
 public:
  // `render_stats` encodes the stats reply (the service's snapshot);
  // `features` are what server_info announces (the serving transfer modes').
  AdminOps(ServiceState* state, std::function<std::string()> render_stats,
           std::vector<std::string> features)
      : state_(state), render_stats_(std::move(render_stats)), features_(std::move(features)) {}
  void AddTo(OpTable* table);
  // Rows of the operations that answer NOT_SUPPORTED.
  static void AddUnsupported(OpTable* table);

 private:
  Result<std::string> Ping(const RequestContext& context, std::optional<std::int64_t> instance);
  // Removes every object (locked ones too with `force`: they retire when
  // their leases end); the objects removed, or why `context` may not.
  Result<std::uint64_t> Clear(const RequestContext& context, bool force);
  Result<std::string> ServerInfo() const;

  ServiceState* const state_;
  const std::function<std::string()> render_stats_;
  const std::vector<std::string> features_;
};

// Whether `context` may run a destructive operation under `access`.
bool MayRunDestructive(AdminAccess access, const RequestContext& context);

}  // namespace lmcache::server
