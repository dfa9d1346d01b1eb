// S3Client: signed S3 requests over HTTP(S), many in flight, on one event
// thread of its own (libcurl's multi interface), so no caller ever waits on
// the network: Submit queues a call and returns; its `done` runs once, on
// the client's thread, when the call has an answer or has run out of time.
//
// - Bounded: at most `max_connections` connections are open at once (the
//   reference's s3_num_io_threads); calls beyond them wait in curl's queue.
//   Connections are kept and reused (HTTP/1.1 keep-alive, or HTTP/2 streams
//   over TLS when preferred and offered).
// - A deadline on each call (`request_timeout`, all its attempts together),
//   and a connect timeout on each attempt.
// - Retries with exponential backoff and jitter on what S3 says is worth
//   retrying: 500, 502, 503 (SlowDown), 504, 429 and transport failures,
//   while the deadline allows. Every attempt is signed afresh (SigV4's date).
// - A gateway that refuses connections, or that no connection reaches
//   before the deadline (packets dropped), is "down" for `retry_interval`:
//   calls submitted meanwhile fail at once (kUnavailable) instead of each
//   waiting out a connect, and the first call after it probes again.
// - https uses the system's CA store (or `ca_bundle`) and verifies the peer
//   and its name.
//
// Thread-safety: Submit and counters() from any thread; `done` and the
// body sink run on the client's thread, one call at a time, and must not
// block (they are the adapter's bookkeeping). Destruction completes every
// call still queued or in flight with kUnavailable before it returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "lmcache/status.h"
#include "tier/s3/sigv4.h"

namespace lmcache::tier {

struct S3ClientConfig {
  std::string scheme = "https";  // "http" or "https"
  std::string host;              // the endpoint's host[:port]
  std::string bucket;
  bool virtual_hosted = true;  // <bucket>.<host>/<object>; else <host>/<bucket>/<object>
  std::string region = "us-east-1";
  S3Credentials credentials;
  std::uint32_t max_connections = 64;
  bool prefer_http2 = true;
  std::string ca_bundle;  // empty: the system's CA store
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds request_timeout{5000};
  std::uint32_t max_attempts = 4;
  std::chrono::milliseconds backoff{25};  // before the 2nd attempt; doubled each time
  std::chrono::milliseconds retry_interval{1000};
};

enum class S3Method : std::uint8_t { kGet, kHead, kPut, kDelete };

struct S3Response {
  long http_status = 0;  // 0: no reply (see `error`)
  Status error;          // OK when a reply came (of any status)
  std::string body;      // a reply's body when no sink took it (capped; see kMaxKeptBody)
  std::uint64_t content_length = 0;  // as the reply declared it (HEAD, GET)
  std::uint32_t attempts = 0;
  bool shut_down = false;  // ended unanswered because the client stopped
  bool ok() const { return error.ok() && http_status >= 200 && http_status < 300; }
};

// A 2xx reply's body, piece by piece: `offset` is where `piece` starts in
// the body (an attempt after a failed one starts again at 0); `length` is
// the body's declared length (-1 when unknown). False refuses the reply:
// the call ends at once (not retried) with error kCorrupt.
using S3BodySink = std::function<bool(std::uint64_t offset, std::int64_t length,
                                      std::span<const std::byte> piece)>;

struct S3Call {
  S3Method method = S3Method::kGet;
  std::string object;  // the object's name; empty: the bucket itself (a listing)
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::span<const std::byte>> body;  // PUT: sent in order; valid until `done`
  S3BodySink sink;                               // GET: null keeps the body in the response
  std::function<void(S3Response)> done;
};

class S3Client {
 public:
  // What a reply's kept body may hold: a listing page (2xx, no sink) is up
  // to kMaxKeptBody; an error's body, which only its <Code> is read of, is
  // cut at kMaxKeptErrorBody, so a hostile gateway cannot make each of many
  // calls hold megabytes.
  static constexpr std::size_t kMaxKeptBody = 16 << 20;
  static constexpr std::size_t kMaxKeptErrorBody = 64 << 10;

  static Result<std::unique_ptr<S3Client>> Create(const S3ClientConfig& config);
  ~S3Client();  // Shutdown(), then frees the handle
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  void Submit(S3Call call) LMC_EXCLUDES(mu_);
  // Stops the client's thread, completing every call queued or in flight
  // as unavailable (on that thread); calls submitted from then on complete
  // at once on the caller's thread. The owner calls it while what the
  // completions touch is still there. Idempotent.
  void Shutdown() LMC_EXCLUDES(mu_);

  // "http://127.0.0.1:7480/bucket" or "https://bucket.s3.example.com": where
  // the objects are, for descriptions (no credentials in it).
  std::string Location() const;

  struct Counters {
    std::uint64_t requests = 0;   // attempts sent
    std::uint64_t retries = 0;    // attempts after the first
    std::uint64_t throttled = 0;  // 503 and 429 replies
    std::uint64_t transport_failures = 0;
    std::uint64_t refused_while_down = 0;
  };
  Counters counters() const LMC_EXCLUDES(mu_);
  // Whether the gateway refused connections within the last retry_interval
  // (calls submitted now fail at once).
  bool down() const LMC_EXCLUDES(mu_);

  struct Transfer;  // one call's state on the client's thread (s3_client.cc)

 private:
  explicit S3Client(const S3ClientConfig& config);
  void Run();
  void StartAttempt(Transfer* transfer);
  void Finished(Transfer* transfer, int curl_code);
  void Complete(std::unique_ptr<Transfer> transfer);
  bool ShouldRetry(const Transfer& transfer, int curl_code) const;
  void SignInto(Transfer* transfer);

  const S3ClientConfig config_;
  void* multi_ = nullptr;  // CURLM*, kept out of this header
  std::thread thread_;

  mutable Mutex mu_;
  std::deque<std::unique_ptr<Transfer>> queued_ LMC_GUARDED_BY(mu_);
  bool stopping_ LMC_GUARDED_BY(mu_) = false;
  Counters counters_ LMC_GUARDED_BY(mu_);
  // Until when the gateway counts as down (steady ms; 0: up).
  std::int64_t down_until_ms_ LMC_GUARDED_BY(mu_) = 0;

  // The client thread's own: transfers in curl, and those waiting to retry.
  std::vector<std::unique_ptr<Transfer>> active_;
};

}  // namespace lmcache::tier
