// EtcdRegistry: fleet membership through etcd (issue 43, section 2;
// `--p2p-peers etcd://HOST:PORT/PREFIX`). This server registers its fleet
// URL under the prefix with a lease it keeps alive, and lists the prefix
// for the peers registered there; a server whose lease lapses (it died, or
// lost etcd for longer than the TTL) leaves every peer's list within the
// TTL and one listing. etcd unreachable: the last listing stands (serving
// goes on with the last membership), and `reachable` and the last error
// say so in /status and the metrics.
//
// How it talks to etcd: its v3 API through the JSON gateway etcd serves on
// its client port (`/v3/lease/grant`, `/v3/lease/keepalive`, `/v3/kv/put`,
// `/v3/kv/range`, `/v3/lease/revoke`; keys and values base64, 64-bit
// integers as strings; with `user`, etcd's own authentication: a token in
// each call's Authorization header), over HTTP with cpp-httplib's client (the library
// the admin endpoint already links). Why not gRPC: Debian ships
// gRPC, but not etcd's .proto files; generating stubs would mean carrying
// a copy of them. The gateway is the same API, and etcd 3.4 (Debian 12's
// etcd-server) serves it by default.
//
// Several entries of `--p2p-peers` naming one prefix are the endpoints of
// one cluster: a call goes to the endpoint that answered last, and on
// failure to each of the others in turn (a member killed, a partition).
// What etcd holds is untrusted input: a listed value that is not a tcp://
// URL is skipped and counted, and a reply is bounded (4 MiB).
//
// Thread-safety: Tick on the registry's thread (Start) or a test's; Urls,
// Stats and View from any thread (`mu_`, a leaf). Stop revokes the lease
// (best effort), so a clean stop leaves the peers' lists at their next
// listing rather than at the TTL.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/periodic_thread.h"
#include "fleet/fleet_stats.h"
#include "lmcache/status.h"

namespace lmcache::fleet {

struct EtcdConfig {
  std::vector<std::string> endpoints;  // HOST:PORT of the cluster's members ([v6] bracketed)
  std::string prefix;                  // "/lmcache": keys are PREFIX/<our URL>
  std::string self_url;                // tcp://HOST:PORT, what we register
  TimeMs ttl_ms = 10'000;              // the lease's TTL; kept alive every TTL / 3
  TimeMs poll_ms = 1'000;              // the prefix listed this often
  TimeMs call_timeout_ms = 2'000;      // one HTTP call, connection included
  // etcd's own authentication (`--p2p-etcd-user`, `--p2p-etcd-password-file`):
  // with a user, every call carries a token from /v3/auth/authenticate,
  // fetched again when etcd refuses it (expired). Empty: no authentication.
  std::string user;
  std::string password;
};

// What /status shows of one registry.
struct EtcdView {
  std::string prefix;
  std::vector<std::string> endpoints;
  bool reachable = false;   // the last call got an answer
  bool registered = false;  // our key is under a live lease
  std::string last_error;   // empty while reachable
  std::uint64_t peers = 0;  // in the last listing, ourselves excluded
};

class EtcdRegistry {
 public:
  // `clock` must outlive the registry.
  static Result<std::unique_ptr<EtcdRegistry>> Create(EtcdConfig config, const Clock* clock);
  ~EtcdRegistry();
  EtcdRegistry(const EtcdRegistry&) = delete;
  EtcdRegistry& operator=(const EtcdRegistry&) = delete;

  void Start();
  void Stop();
  // One pass: grants a lease and registers when none is held, keeps it
  // alive (and re-puts the key) when due, and lists the prefix when due.
  void Tick() LMC_EXCLUDES(mu_);

  // The peers' fleet URLs of the last listing (ourselves excluded).
  std::vector<std::string> Urls() const LMC_EXCLUDES(mu_);
  EtcdView View() const LMC_EXCLUDES(mu_);
  EtcdStats Stats() const LMC_EXCLUDES(mu_);

  // The gateway's encodings, for tests: a key's range end (the prefix
  // with its last byte plus one) and base64.
  static std::string RangeEnd(std::string prefix);
  static std::string Base64(std::string_view bytes);
  static Result<std::string> FromBase64(std::string_view text);

 private:
  EtcdRegistry(EtcdConfig config, const Clock* clock);
  // POSTs `body` (JSON) to `path` at the endpoints in turn; the parsed reply.
  Result<std::string> Call(const std::string& path, const std::string& body);
  // One POST to one endpoint; `status` gets the HTTP status (0: no answer).
  Result<std::string> Post(std::size_t at, const std::string& path, const std::string& body,
                           int* status);
  // A token for config_.user from the endpoint `at`.
  Status Authenticate(std::size_t at);
  Status Register();
  // Puts our key under the lease (again: a key deleted by hand, or a put
  // that failed, comes back at the next keep-alive).
  Status PutKey();
  Status KeepAlive();
  Status List();
  void Failed(const Status& status) LMC_EXCLUDES(mu_);

  const EtcdConfig config_;
  const Clock* const clock_;
  std::size_t endpoint_ = 0;  // the one that answered last
  std::string lease_;         // the lease's id, as etcd writes it; empty: none
  std::string token_;         // etcd's auth token for config_.user; empty: none yet
  TimeMs next_keepalive_ms_ = 0;
  TimeMs next_list_ms_ = 0;
  std::unique_ptr<PeriodicThread> thread_;

  mutable Mutex mu_;
  std::vector<std::string> urls_ LMC_GUARDED_BY(mu_);
  bool reachable_ LMC_GUARDED_BY(mu_) = false;
  bool registered_ LMC_GUARDED_BY(mu_) = false;
  std::string last_error_ LMC_GUARDED_BY(mu_) = "not asked yet";
  EtcdStats counts_ LMC_GUARDED_BY(mu_);
};

}  // namespace lmcache::fleet
