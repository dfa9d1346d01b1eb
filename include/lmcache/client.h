// lmcache/client.h: the C++ client library of lmcache-server.
//
// A Client speaks the server's ZeroMQ protocol (the LMCache MP protocol) over
// one DEALER socket and moves KV bytes through the server's shared-memory
// pool, which it maps after registering: Store() reserves slots, copies the
// chunks in and commits; Retrieve() looks the prefix up, copies it out and
// releases its locks. Large copies are split across threads. Every error
// comes back as a Status carrying the server's code and message
// (lmcache/status.h), or kTimeout / kUnavailable when the server does not
// answer.
//
// Thread-safety: a Client is NOT thread-safe: use one per thread (or guard it).
// Distinct Clients are independent. The pool mapping is shared by nobody else
// in the process and unmapped when the Client is destroyed; the client never
// unlinks the server's segment.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/messages.h"
#include "lmcache/status.h"

namespace lmcache::client {

struct ClientOptions {
  std::string url = "tcp://127.0.0.1:5555";  // tcp://HOST:PORT or ipc:///PATH
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{30000};
  // Threads for copies into and out of the pool, the calling one included;
  // 0 = one per core. They are started at Connect() and kept: a forked child
  // must connect its own Client. Copies below 8 MiB stay on the caller.
  unsigned copy_threads = 0;
  // From Register() on, map every page of the pool into this process on a
  // background thread (one read per page), so copies pay no page fault: a
  // first touch of a shared page through a fresh mapping costs far more than
  // copying it (docs/performance.md). Costs about a second per GiB of 4 KiB
  // pages on the VMs we measured, far less with huge pages; turn it off for
  // short-lived clients that copy little.
  bool prefault_pool = true;
};

struct ServerInfo {
  std::string version;
  std::string boot_id;  // changes at every server start
  std::string shm_name;
  std::uint64_t pool_size = 0;
  std::int64_t chunk_size = 0;
};

// The wire's payload types (lmcache/messages.h), under the client's names.
using EngineContext = lmcache::EngineContext;  // the engine's KV layout
using Registration = lmcache::Registration;
// A range of a prompt: start/end are token offsets that must be multiples of
// the chunk size; token_ids is the whole prompt.
using KeySpec = lmcache::IpcKey;

struct StoreResult {
  std::size_t stored = 0;          // chunks copied in and committed
  std::size_t already_cached = 0;  // chunks the server had: skipped
  std::size_t out_of_memory = 0;   // chunks with no room in L1: skipped
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // True from a live server; once registered, also proves the server still
  // holds this client's registration (kNotRegistered: register again).
  Status Ping();
  Result<ServerInfo> GetServerInfo();
  Result<std::int64_t> GetChunkSize();

  // Registers the engine context and maps the pool segment it names.
  Result<Registration> Register(const EngineContext& context);
  Status Unregister();
  // True once every page of the pool is mapped into this process (prefault_pool),
  // waiting up to `timeout` for it.
  bool WaitPoolWarm(std::chrono::milliseconds timeout);

  // Stores chunks [key.start, key.end): chunks[i] holds chunk i of the range
  // and must be exactly one object long (see ObjectBytes()).
  Result<StoreResult> Store(const KeySpec& key, std::span<const std::span<const std::byte>> chunks);

  // Looks the whole prompt up (read-locking the hit prefix on every rank for
  // key.num_kv_readers readers) and returns the number of leading chunks hit.
  Result<std::size_t> Lookup(const KeySpec& key);
  // Copies chunks [key.start, key.end), which a Lookup must have found, into
  // `out` (one span per chunk, each one object long) and releases their locks.
  Status Retrieve(const KeySpec& key, std::span<const std::span<std::byte>> out);
  // Releases lookup locks of chunks in [key.start, key.end) that will not be retrieved.
  Status FreeLookupLocks(const KeySpec& key);
  Status EndSession(const std::string& request_id);

  // Bytes of one object of the registered layout.
  std::uint64_t ObjectBytes() const;
  const Registration& registration() const;

  // One raw request: `operation` is a name (e.g. "stats"); payloads are
  // msgpack-encoded frames. Returns the reply's value frame (msgpack).
  Result<std::string> Call(std::string_view operation, std::vector<std::string> payloads);

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmcache::client
