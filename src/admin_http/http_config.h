// HttpConfig: how the operator's HTTP surface is served and who may change
// things through it (--http-* flags).
//
// Thread-safety: a plain value, read-only once the server starts.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/flag_values.h"

namespace lmcache::admin_http {

struct HttpConfig {
  std::string host = "127.0.0.1";  // --http-host
  int port = 8080;                 // --http-port; 0 = disabled, -1 = any free port (tests)
  bool read_only = false;          // --http-read-only: mutating routes refused
  // Mutating routes need 'Authorization: Bearer <admin_token>' when it is set,
  // are open to every peer with admin_open, and are off otherwise.
  std::string admin_token;  // --http-admin-token-file's content
  bool admin_open = false;  // --http-admin-open
  // --l2-fs-root: fs adapters added at runtime must lie under it ("" = none may be added).
  std::string l2_fs_root;
  // What GET /config shows: every flag (secrets masked).
  std::vector<FlagValue> flags;
  // A DELETE /cache/objects of 10,000 keys is about 2 MiB of JSON.
  std::size_t max_body_bytes = 4 * 1024 * 1024;
  // Reads and writes of one request (its deadlines: admin_http/guarded_http.h).
  int io_timeout_seconds = 5;
};

}  // namespace lmcache::admin_http
