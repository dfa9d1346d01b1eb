// LocalServer: an lmcache-server started by a tool (lmcache-bench,
// lmcache-soak) for one run, on a private ipc socket; stopped with SIGTERM
// and reaped when the object dies.
// Thread-safety: one owner.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::tools {

// `given` if set, else lmcache-server next to this tool or in ../src.
std::string FindServerBinary(const std::string& given);

class LocalServer {
 public:
  // Starts `binary` with `--url ipc://<temp>/<name>.sock` and `args`, and
  // waits until it answers a ping (pre-faulting a large pool takes seconds).
  static Result<std::unique_ptr<LocalServer>> Start(const std::string& binary,
                                                    const std::string& name,
                                                    const std::vector<std::string>& args);
  ~LocalServer();
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  const std::string& url() const { return url_; }
  pid_t pid() const { return pid_; }

 private:
  LocalServer() = default;
  std::string url_;
  pid_t pid_ = -1;
};

}  // namespace lmcache::tools
