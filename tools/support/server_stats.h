// ServerStats: the server's `stats` reply, read by dotted path
// ("l1.read_locks", "l2.store.stored", "l2.adapters.0.objects"), for the
// tools that check balances or wait for the server to finish background work.
// Thread-safety: a value; Fetch uses the given client (one thread).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <msgpack.hpp>

#include "lmcache/client.h"
#include "lmcache/status.h"

namespace lmcache::tools {

class ServerStats {
 public:
  static Result<ServerStats> Fetch(client::Client& client);
  // The number at `path` (an array element by its index), or nullopt.
  std::optional<double> Number(std::string_view path) const;

 private:
  std::shared_ptr<msgpack::object_handle> root_;
};

}  // namespace lmcache::tools
