// LocalRedis: a redis-server started by the benchmark on a unix socket in a
// temporary directory, persistence off, stopped (and the directory removed)
// when the object dies. Used by the redis path (Redis as the store users
// would otherwise deploy) and the resp L2 phase (Redis behind the server).
// Thread-safety: one owner.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "lmcache/status.h"

namespace lmcache::bench {

class LocalRedis {
 public:
  // `tag` names the directory; fails with redis's log when it does not serve.
  // With `tcp_port`, it also listens on 127.0.0.1 there (as a Redis that
  // other nodes reach would: the p2p phase's cross-node path).
  static Result<std::unique_ptr<LocalRedis>> Start(const std::string& binary,
                                                   const std::string& tag, int tcp_port = 0);
  ~LocalRedis();
  LocalRedis(const LocalRedis&) = delete;
  LocalRedis& operator=(const LocalRedis&) = delete;

  const std::string& socket_path() const { return socket_path_; }

 private:
  LocalRedis(pid_t pid, std::string dir, std::string socket_path)
      : pid_(pid), dir_(std::move(dir)), socket_path_(std::move(socket_path)) {}
  pid_t pid_;
  std::string dir_;
  std::string socket_path_;
};

}  // namespace lmcache::bench
