#include "tier/s3/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>

namespace lmcache::tier {
namespace {

constexpr std::string_view kEmptyPayloadHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string_view MethodName(S3Method method) {
  switch (method) {
    case S3Method::kGet: return "GET";
    case S3Method::kHead: return "HEAD";
    case S3Method::kPut: return "PUT";
    case S3Method::kDelete: return "DELETE";
  }
  return "GET";
}

CURLM* Multi(void* multi) { return static_cast<CURLM*>(multi); }

}  // namespace

struct S3Client::Transfer {
  ~Transfer() {
    if (headers != nullptr) curl_slist_free_all(headers);
    if (easy != nullptr) curl_easy_cleanup(easy);
  }

  S3Call call;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string url;
  std::int64_t deadline_ms = 0;
  std::int64_t retry_at_ms = 0;  // waiting to retry when set
  bool in_curl = false;
  // This attempt's state.
  std::size_t piece = 0;         // upload: the body piece being sent
  std::size_t piece_offset = 0;  // ... and how far into it
  std::uint64_t body_offset = 0;
  bool sink_refused = false;
  bool body_too_large = false;
  S3Response response;
  char error_text[CURL_ERROR_SIZE] = {};
};

namespace {

using Transfer = S3Client::Transfer;

std::uint64_t UploadBytes(const S3Call& call) {
  std::uint64_t total = 0;
  for (const auto& piece : call.body) total += piece.size();
  return total;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  long status = 0;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
  if (status >= 200 && status < 300 && t->call.sink) {
    curl_off_t length = -1;
    curl_easy_getinfo(t->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(data), bytes);
    if (!t->call.sink(t->body_offset, length, piece)) {
      t->sink_refused = true;
      return 0;  // aborts the transfer
    }
    t->body_offset += bytes;
    return bytes;
  }
  const std::size_t cap =
      status >= 200 && status < 300 ? S3Client::kMaxKeptBody : S3Client::kMaxKeptErrorBody;
  if (t->response.body.size() + bytes > cap) {
    t->body_too_large = true;
    return 0;
  }
  t->response.body.append(data, bytes);
  return bytes;
}

size_t OnUpload(char* buffer, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t room = size * count;
  size_t written = 0;
  while (room > 0 && t->piece < t->call.body.size()) {
    const std::span<const std::byte> piece = t->call.body[t->piece];
    const size_t n = std::min(room, piece.size() - t->piece_offset);
    std::memcpy(buffer + written, piece.data() + t->piece_offset, n);
    written += n;
    room -= n;
    t->piece_offset += n;
    if (t->piece_offset == piece.size()) {
      ++t->piece;
      t->piece_offset = 0;
    }
  }
  return written;
}

// curl rewinds an upload to send it again on the same attempt (a 100-continue
// refused, a connection closed before the reply).
int OnSeek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0) return CURL_SEEKFUNC_CANTSEEK;
  auto left = static_cast<std::uint64_t>(offset);
  t->piece = 0;
  t->piece_offset = 0;
  while (t->piece < t->call.body.size() && left >= t->call.body[t->piece].size()) {
    left -= t->call.body[t->piece].size();
    ++t->piece;
  }
  if (left > 0 && t->piece == t->call.body.size()) return CURL_SEEKFUNC_FAIL;
  t->piece_offset = static_cast<std::size_t>(left);
  return CURL_SEEKFUNC_OK;
}

bool RetryableStatus(long status) {
  return status == 500 || status == 502 || status == 503 || status == 504 || status == 429;
}

bool ConnectFailure(int code) {
  return code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST;
}

// Failures another attempt cannot cure: a certificate that does not verify,
// a URL or protocol curl refuses.
bool PermanentFailure(int code) {
  return code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE ||
         code == CURLE_SSL_CERTPROBLEM || code == CURLE_URL_MALFORMAT ||
         code == CURLE_UNSUPPORTED_PROTOCOL;
}

}  // namespace

Result<std::unique_ptr<S3Client>> S3Client::Create(const S3ClientConfig& config) {
  static std::once_flag curl_init;
  std::call_once(curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (config.scheme != "http" && config.scheme != "https") {
    return Status(ErrorCode::kInvalidConfig, "the S3 endpoint's scheme must be http or https");
  }
  if (config.host.empty() || config.bucket.empty()) {
    return Status(ErrorCode::kInvalidConfig, "the S3 endpoint needs a host and a bucket");
  }
  std::unique_ptr<S3Client> client(new S3Client(config));
  if (client->multi_ == nullptr) {
    return Status(ErrorCode::kInternal, "libcurl could not make a multi handle");
  }
  client->thread_ = std::thread([c = client.get()] { c->Run(); });
  return client;
}

S3Client::S3Client(const S3ClientConfig& config) : config_(config), multi_(curl_multi_init()) {
  if (multi_ == nullptr) return;
  const long connections = std::max<long>(1, config_.max_connections);
  curl_multi_setopt(Multi(multi_), CURLMOPT_MAX_TOTAL_CONNECTIONS, connections);
  curl_multi_setopt(Multi(multi_), CURLMOPT_MAX_HOST_CONNECTIONS, connections);
  curl_multi_setopt(Multi(multi_), CURLMOPT_MAXCONNECTS, connections);
  curl_multi_setopt(Multi(multi_), CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
}

S3Client::~S3Client() {
  Shutdown();
  if (multi_ != nullptr) curl_multi_cleanup(Multi(multi_));
}

void S3Client::Shutdown() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (multi_ != nullptr) curl_multi_wakeup(Multi(multi_));
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::string S3Client::Location() const {
  return config_.virtual_hosted ? config_.scheme + "://" + config_.bucket + "." + config_.host
                                : config_.scheme + "://" + config_.host + "/" + config_.bucket;
}

void S3Client::Submit(S3Call call) {
  auto transfer = std::make_unique<Transfer>();
  transfer->call = std::move(call);
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      queued_.push_back(std::move(transfer));
      curl_multi_wakeup(Multi(multi_));
      return;
    }
  }
  transfer->response.error = Status(ErrorCode::kUnavailable, "the S3 client is shutting down");
  transfer->response.shut_down = true;
  transfer->call.done(std::move(transfer->response));
}

S3Client::Counters S3Client::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

bool S3Client::down() const {
  MutexLock lock(&mu_);
  return SteadyMs() < down_until_ms_;
}

void S3Client::SignInto(Transfer* t) {
  const S3Call& call = t->call;
  const std::string host =
      config_.virtual_hosted ? config_.bucket + "." + config_.host : config_.host;
  std::string path = config_.virtual_hosted ? "" : "/" + UriEncode(config_.bucket, false);
  if (!call.object.empty()) path += "/" + UriEncode(call.object, true);
  if (path.empty()) path = "/";
  const std::string query = CanonicalQuery(call.query);
  t->url = config_.scheme + "://" + host + path + (query.empty() ? "" : "?" + query);

  const std::string date = AmzDate(std::chrono::system_clock::now());
  const std::string payload_hash(call.method == S3Method::kPut ? kUnsignedPayload
                                                               : kEmptyPayloadHash);
  SigV4Request request{
      MethodName(call.method),
      path,
      call.query,
      {{"host", host}, {"x-amz-content-sha256", payload_hash}, {"x-amz-date", date}},
      payload_hash};
  if (!config_.credentials.session_token.empty()) {
    request.headers.emplace_back("x-amz-security-token", config_.credentials.session_token);
  }
  const std::string authorization =
      AuthorizationHeader(request, config_.credentials, date, config_.region, "s3");
  if (t->headers != nullptr) curl_slist_free_all(t->headers);
  t->headers = nullptr;
  for (const auto& [name, value] : request.headers) {
    t->headers = curl_slist_append(t->headers, (name + ": " + value).c_str());
  }
  t->headers = curl_slist_append(t->headers, ("Authorization: " + authorization).c_str());
  // No 100-continue round trip before each object: an object's PUT is one
  // write of a few MiB that the gateway takes or refuses whole.
  t->headers = curl_slist_append(t->headers, "Expect:");
}

void S3Client::StartAttempt(Transfer* t) {
  t->piece = 0;
  t->piece_offset = 0;
  t->body_offset = 0;
  t->sink_refused = false;
  t->body_too_large = false;
  t->response.body.clear();
  t->response.http_status = 0;
  t->response.error = Status::Ok();
  t->error_text[0] = '\0';
  if (t->easy == nullptr) {
    t->easy = curl_easy_init();
  } else {
    curl_easy_reset(t->easy);
  }
  SignInto(t);
  CURL* easy = t->easy;
  curl_easy_setopt(easy, CURLOPT_URL, t->url.c_str());
  curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);  // the path is signed as sent
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t->headers);
  curl_easy_setopt(easy, CURLOPT_PRIVATE, t);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t->error_text);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, t);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(config_.connect_timeout.count()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(std::max<std::int64_t>(1, t->deadline_ms - SteadyMs())));
  const bool http2 = config_.prefer_http2 && config_.scheme == "https";
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION,
                   http2 ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1);
  if (!config_.ca_bundle.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, config_.ca_bundle.c_str());
  switch (t->call.method) {
    case S3Method::kHead: curl_easy_setopt(easy, CURLOPT_NOBODY, 1L); break;
    case S3Method::kPut:
      curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(easy, CURLOPT_READFUNCTION, OnUpload);
      curl_easy_setopt(easy, CURLOPT_READDATA, t);
      curl_easy_setopt(easy, CURLOPT_SEEKFUNCTION, OnSeek);
      curl_easy_setopt(easy, CURLOPT_SEEKDATA, t);
      curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE,
                       static_cast<curl_off_t>(UploadBytes(t->call)));
      break;
    case S3Method::kDelete: curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, "DELETE"); break;
    case S3Method::kGet: break;
  }
  {
    MutexLock lock(&mu_);
    ++counters_.requests;
    if (t->response.attempts > 0) ++counters_.retries;
  }
  ++t->response.attempts;
  t->in_curl = true;
  curl_multi_add_handle(Multi(multi_), easy);
}

bool S3Client::ShouldRetry(const Transfer& t, int code) const {
  if (t.sink_refused || t.body_too_large || t.response.attempts >= config_.max_attempts) {
    return false;
  }
  if (code == CURLE_OK) return RetryableStatus(t.response.http_status);
  // The deadline ran out (each attempt's timeout is what is left of it), or
  // the gateway is not there: no use trying again now.
  return code != CURLE_OPERATION_TIMEDOUT && !ConnectFailure(code) && !PermanentFailure(code);
}

void S3Client::Finished(Transfer* t, int code) {
  curl_multi_remove_handle(Multi(multi_), t->easy);
  t->in_curl = false;
  long status = 0;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
  curl_off_t length = -1;
  curl_easy_getinfo(t->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  // No connection made before the deadline: nothing answers at that address
  // (a partition drops the packets), which is the gateway being down too.
  curl_off_t connect_us = 0;
  curl_easy_getinfo(t->easy, CURLINFO_CONNECT_TIME_T, &connect_us);
  const bool connected = connect_us > 0;
  t->response.http_status = code == CURLE_OK ? status : 0;
  t->response.content_length = length < 0 ? 0 : static_cast<std::uint64_t>(length);
  if (t->sink_refused) {
    t->response.error = Status(ErrorCode::kCorrupt, "the reply is not what was asked for");
  } else if (t->body_too_large) {
    t->response.error = Status(ErrorCode::kIoError, "the reply's body is too large");
  } else if (code != CURLE_OK) {
    const std::string detail =
        t->error_text[0] != '\0' ? t->error_text : curl_easy_strerror(CURLcode(code));
    t->response.error =
        Status(code == CURLE_OPERATION_TIMEDOUT ? ErrorCode::kTimeout : ErrorCode::kUnavailable,
               "S3 " + std::string(MethodName(t->call.method)) + ": " + detail);
  }
  {
    MutexLock lock(&mu_);
    if (code != CURLE_OK && !t->sink_refused && !t->body_too_large) ++counters_.transport_failures;
    if (code == CURLE_OK && (status == 503 || status == 429)) ++counters_.throttled;
    if (ConnectFailure(code) || (code == CURLE_OPERATION_TIMEDOUT && !connected)) {
      down_until_ms_ = SteadyMs() + config_.retry_interval.count();
    }
  }
  if (ShouldRetry(*t, code)) {
    // Full jitter over an exponential step, so throttled callers spread out.
    thread_local std::minstd_rand random(std::random_device{}());
    const std::int64_t step = config_.backoff.count()
                              << std::min<std::uint32_t>(t->response.attempts - 1, 10);
    const std::int64_t delay = step / 2 + static_cast<std::int64_t>(random() % (step / 2 + 1));
    const std::int64_t at = SteadyMs() + delay;
    if (at < t->deadline_ms) {
      t->retry_at_ms = std::max<std::int64_t>(at, 1);
      return;
    }
  }
  const auto it = std::find_if(active_.begin(), active_.end(),
                               [t](const std::unique_ptr<Transfer>& a) { return a.get() == t; });
  std::unique_ptr<Transfer> done = std::move(*it);
  active_.erase(it);
  Complete(std::move(done));
}

void S3Client::Complete(std::unique_ptr<Transfer> t) {
  auto done = std::move(t->call.done);
  S3Response response = std::move(t->response);
  t.reset();  // the easy handle goes before the caller may free the body
  done(std::move(response));
}

void S3Client::Run() {
  while (true) {
    std::deque<std::unique_ptr<Transfer>> arrived;
    std::int64_t down_until = 0;
    {
      MutexLock lock(&mu_);
      if (stopping_) break;
      arrived.swap(queued_);
      down_until = down_until_ms_;
    }
    const std::int64_t now = SteadyMs();
    const bool down = now < down_until;
    for (auto& t : arrived) {
      if (down) {
        {
          MutexLock lock(&mu_);
          ++counters_.refused_while_down;
        }
        t->response.error = Status(ErrorCode::kUnavailable,
                                   "the S3 gateway " + Location() +
                                       " refused connections; not retried before retry_interval");
        Complete(std::move(t));
        continue;
      }
      t->deadline_ms = now + config_.request_timeout.count();
      active_.push_back(std::move(t));
      StartAttempt(active_.back().get());
    }
    // Retries that are due (those found down complete with their last answer).
    for (std::size_t i = 0; i < active_.size();) {
      Transfer* t = active_[i].get();
      if (t->retry_at_ms == 0 || t->in_curl || (t->retry_at_ms > now && !down)) {
        ++i;
        continue;
      }
      t->retry_at_ms = 0;
      if (down) {
        std::unique_ptr<Transfer> done = std::move(active_[i]);
        active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
        Complete(std::move(done));
        continue;
      }
      StartAttempt(t);
      ++i;
    }
    int running = 0;
    curl_multi_perform(Multi(multi_), &running);
    int left = 0;
    while (CURLMsg* message = curl_multi_info_read(Multi(multi_), &left)) {
      if (message->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(message->easy_handle, CURLINFO_PRIVATE, &t);
      Finished(t, message->data.result);
    }
    std::int64_t next_retry = 0;
    for (const auto& t : active_) {
      if (t->retry_at_ms != 0 && !t->in_curl) {
        next_retry = next_retry == 0 ? t->retry_at_ms : std::min(next_retry, t->retry_at_ms);
      }
    }
    int wait_ms = 200;
    if (next_retry != 0)
      wait_ms = static_cast<int>(std::clamp<std::int64_t>(next_retry - SteadyMs(), 0, 200));
    curl_multi_poll(Multi(multi_), nullptr, 0, wait_ms, nullptr);
  }
  // Shutting down: everything still here completes, unanswered.
  std::deque<std::unique_ptr<Transfer>> left_over;
  {
    MutexLock lock(&mu_);
    left_over.swap(queued_);
  }
  for (auto& t : active_) {
    if (t->in_curl) curl_multi_remove_handle(Multi(multi_), t->easy);
    left_over.push_back(std::move(t));
  }
  active_.clear();
  for (auto& t : left_over) {
    t->response.error = Status(ErrorCode::kUnavailable, "the S3 client is shutting down");
    t->response.shut_down = true;
    Complete(std::move(t));
  }
}

}  // namespace lmcache::tier
