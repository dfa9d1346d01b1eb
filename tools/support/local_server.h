// LocalServer: an lmcache-server started by a tool (lmcache-bench,
// lmcache-soak) for one run, on a private ipc socket; stopped with SIGTERM
// and reaped when the object dies. Its log goes to a file next to the
// socket: a start that fails or times out quotes the log's last lines in its
// error (and the file is kept); otherwise whatever the server logged is
// copied to stderr, each line prefixed with the server's name, when it is
// stopped, and the file removed.
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

  // SIGKILL, as a crash: nothing is flushed, removed or handed over.
  void Kill();

  const std::string& url() const { return url_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

 private:
  LocalServer() = default;
  // "name (binary, pid, url)", and the log's last lines when there are any.
  std::string Describe(const std::string& what) const;
  std::string name_;
  std::string description_;
  std::string url_;
  std::string log_path_;
  mutable bool log_quoted_ = false;  // an error quoted it: kept, not echoed again
  pid_t pid_ = -1;
};

}  // namespace lmcache::tools
