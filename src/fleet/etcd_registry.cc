#include "fleet/etcd_registry.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "fleet/peer_source.h"

namespace lmcache::fleet {

LMC_STATS_ROWS(EtcdStatRows, EtcdStats, LMC_ETCD_STATS)

namespace {

// A reply past this is not etcd's answer to our small calls: refused.
constexpr std::size_t kMaxEtcdReplyBytes = 4u << 20;

using Json = nlohmann::json;

// etcd's gateway writes 64-bit integers as strings; accept either.
std::int64_t IntOf(const Json& value) {
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (value.is_string()) {
    try {
      return std::stoll(value.get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

std::string LeaseText(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<std::int64_t>());
  return {};
}

}  // namespace

std::string EtcdRegistry::RangeEnd(std::string prefix) {
  // Every key that starts with `prefix`: up to the prefix with its last
  // byte incremented (a trailing 0xff is dropped and the next one raised).
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // the whole key space
}

std::string EtcdRegistry::Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

Result<std::string> EtcdRegistry::FromBase64(std::string_view text) {
  if (text.size() % 4 != 0) return InvalidArgument("base64 of a length not a multiple of 4");
  std::string out(3 * (text.size() / 4), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return InvalidArgument("not base64");
  std::size_t padding = 0;
  if (!text.empty() && text.back() == '=')
    padding = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
  out.resize(static_cast<std::size_t>(n) - padding);
  return out;
}

Result<std::unique_ptr<EtcdRegistry>> EtcdRegistry::Create(EtcdConfig config, const Clock* clock) {
  if (config.endpoints.empty() || config.prefix.empty() || config.self_url.empty()) {
    return InvalidArgument("etcd membership needs an endpoint, a prefix and our own URL");
  }
  return std::unique_ptr<EtcdRegistry>(new EtcdRegistry(std::move(config), clock));
}

EtcdRegistry::EtcdRegistry(EtcdConfig config, const Clock* clock)
    : config_(std::move(config)), clock_(clock) {}

EtcdRegistry::~EtcdRegistry() { Stop(); }

void EtcdRegistry::Start() {
  Tick();  // registered (or the failure known) before the first probes
  const auto period = std::chrono::milliseconds(std::max<TimeMs>(50, config_.poll_ms / 2));
  thread_ = std::make_unique<PeriodicThread>("p2p-etcd", period, [this] { Tick(); });
  thread_->Start();
}

void EtcdRegistry::Stop() {
  if (!thread_) return;
  thread_->Stop();
  thread_.reset();
  if (!lease_.empty()) {
    // Our key goes with the lease: peers drop us at their next listing.
    (void)Call("/v3/lease/revoke", Json{{"ID", lease_}}.dump());
    lease_.clear();
  }
}

Result<std::string> EtcdRegistry::Post(std::size_t at, const std::string& path,
                                       const std::string& body, int* status) {
  const auto timeout = std::chrono::milliseconds(config_.call_timeout_ms);
  // A client per call: a member killed mid-connection leaves nothing behind.
  httplib::Client client("http://" + config_.endpoints[at]);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  std::string reply;
  bool too_large = false;
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  if (!token_.empty() && path != "/v3/auth/authenticate") {
    request.set_header("Authorization", token_);
  }
  request.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    if (reply.size() + size > kMaxEtcdReplyBytes) {
      too_large = true;
      return false;
    }
    reply.append(data, size);
    return true;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(request, response, error);
  *status = sent ? response.status : 0;
  if (sent && response.status == 200 && !too_large) return reply;
  const std::string why = too_large ? "a reply past 4 MiB"
                          : !sent   ? httplib::to_string(error)
                                    : "HTTP " + std::to_string(response.status) + " " +
                                        reply.substr(0, 200);
  return Status(ErrorCode::kUnavailable, "etcd " + config_.endpoints[at] + path + ": " + why);
}

Status EtcdRegistry::Authenticate(std::size_t at) {
  token_.clear();
  int status = 0;
  LMC_ASSIGN_OR_RETURN(
      const std::string reply,
      Post(at, "/v3/auth/authenticate",
           Json{{"name", config_.user}, {"password", config_.password}}.dump(), &status));
  const Json answer = Json::parse(reply, nullptr, false);
  if (answer.is_discarded() || !answer.contains("token") || !answer["token"].is_string()) {
    return Status(ErrorCode::kUnavailable, "etcd " + config_.endpoints[at] +
                                               " answered the authentication without a token");
  }
  token_ = answer["token"].get<std::string>();
  return Status::Ok();
}

Result<std::string> EtcdRegistry::Call(const std::string& path, const std::string& body) {
  Status last;
  for (std::size_t tried = 0; tried < config_.endpoints.size(); ++tried) {
    const std::size_t at = (endpoint_ + tried) % config_.endpoints.size();
    if (!config_.user.empty() && token_.empty()) {
      if (Status authenticated = Authenticate(at); !authenticated.ok()) {
        last = authenticated;
        continue;
      }
    }
    int status = 0;
    Result<std::string> reply = Post(at, path, body, &status);
    if (!reply.ok() && !config_.user.empty() && (status == 401 || status == 403)) {
      // The token expired (or this member does not know it): once more, anew.
      if (Status authenticated = Authenticate(at); authenticated.ok()) {
        reply = Post(at, path, body, &status);
      }
    }
    if (reply.ok()) {
      endpoint_ = at;
      return reply;
    }
    last = reply.status();
  }
  return last;
}

Status EtcdRegistry::Register() {
  const std::int64_t ttl_s = std::max<TimeMs>(1, (config_.ttl_ms + 999) / 1000);
  LMC_ASSIGN_OR_RETURN(const std::string granted,
                       Call("/v3/lease/grant", Json{{"TTL", ttl_s}}.dump()));
  const Json grant = Json::parse(granted, nullptr, false);
  if (grant.is_discarded() || !grant.contains("ID")) {
    return Status(ErrorCode::kUnavailable, "etcd granted no lease: " + granted.substr(0, 200));
  }
  lease_ = LeaseText(grant["ID"]);
  {
    MutexLock lock(&mu_);
    counts_.lease_grants += 1;
  }
  return PutKey();
}

Status EtcdRegistry::PutKey() {
  const std::string key = config_.prefix + "/" + config_.self_url;
  LMC_RETURN_IF_ERROR(
      Call(
          "/v3/kv/put",
          Json{{"key", Base64(key)}, {"value", Base64(config_.self_url)}, {"lease", lease_}}.dump())
          .status());
  next_keepalive_ms_ = clock_->NowMs() + config_.ttl_ms / 3;
  MutexLock lock(&mu_);
  registered_ = true;
  return Status::Ok();
}

Status EtcdRegistry::KeepAlive() {
  LMC_ASSIGN_OR_RETURN(const std::string reply,
                       Call("/v3/lease/keepalive", Json{{"ID", lease_}}.dump()));
  const Json answer = Json::parse(reply, nullptr, false);
  const bool alive = !answer.is_discarded() && answer.contains("result") &&
                     answer["result"].contains("TTL") && IntOf(answer["result"]["TTL"]) > 0;
  if (!alive) {
    // Lapsed (etcd was out of reach past the TTL): registered again at once.
    lease_.clear();
    {
      MutexLock lock(&mu_);
      registered_ = false;
    }
    return Register();
  }
  return PutKey();
}

Status EtcdRegistry::List() {
  const std::string from = config_.prefix + "/";
  LMC_ASSIGN_OR_RETURN(
      const std::string reply,
      Call("/v3/kv/range",
           Json{{"key", Base64(from)}, {"range_end", Base64(RangeEnd(from))}}.dump()));
  const Json answer = Json::parse(reply, nullptr, false);
  if (answer.is_discarded() || !answer.is_object()) {
    return Status(ErrorCode::kUnavailable, "etcd's range reply is not JSON");
  }
  std::vector<std::string> urls;
  std::uint64_t bad = 0;
  if (answer.contains("kvs") && answer["kvs"].is_array()) {
    for (const Json& kv : answer["kvs"]) {
      auto value = kv.contains("value") && kv["value"].is_string()
                       ? FromBase64(kv["value"].get<std::string>())
                       : Result<std::string>(InvalidArgument("no value"));
      // A peer's fleet URL, as --p2p-peers would take it; anything else skipped.
      auto parsed = value.ok() && value->starts_with("tcp://")
                        ? ParsePeerSources(*value)
                        : Result<std::vector<PeerSource>>(InvalidArgument("not a tcp:// URL"));
      if (!parsed.ok() || parsed->size() != 1) {
        bad += 1;
        continue;
      }
      const std::string url = (*parsed)[0].ToString();
      if (url != config_.self_url) urls.push_back(url);
    }
  }
  std::sort(urls.begin(), urls.end());
  urls.erase(std::unique(urls.begin(), urls.end()), urls.end());
  next_list_ms_ = clock_->NowMs() + config_.poll_ms;
  MutexLock lock(&mu_);
  urls_ = std::move(urls);
  counts_.listings += 1;
  counts_.bad_entries += bad;
  return Status::Ok();
}

void EtcdRegistry::Failed(const Status& status) {
  MutexLock lock(&mu_);
  if (reachable_) {
    spdlog::warn("p2p: etcd {} unreachable ({}); keeping the last {} peers", config_.prefix,
                 status.message(), urls_.size());
  }
  reachable_ = false;
  last_error_ = status.message();
  counts_.failures += 1;
}

void EtcdRegistry::Tick() {
  const TimeMs now = clock_->NowMs();
  Status status;
  if (lease_.empty()) {
    status = Register();
  } else if (now >= next_keepalive_ms_) {
    status = KeepAlive();
  }
  if (status.ok() && now >= next_list_ms_) status = List();
  if (!status.ok()) {
    Failed(status);
    // A key put without a lease we know of expires with it; we grant anew.
    if (lease_.empty()) {
      MutexLock lock(&mu_);
      registered_ = false;
    }
    return;
  }
  MutexLock lock(&mu_);
  if (!reachable_)
    spdlog::info("p2p: etcd {} reachable; {} peers listed", config_.prefix, urls_.size());
  reachable_ = true;
  last_error_.clear();
}

std::vector<std::string> EtcdRegistry::Urls() const {
  MutexLock lock(&mu_);
  return urls_;
}

EtcdView EtcdRegistry::View() const {
  MutexLock lock(&mu_);
  return {config_.prefix, config_.endpoints, reachable_, registered_, last_error_, urls_.size()};
}

EtcdStats EtcdRegistry::Stats() const {
  MutexLock lock(&mu_);
  EtcdStats s = counts_;
  s.reachable = reachable_ ? 1 : 0;
  s.registered = registered_ ? 1 : 0;
  s.peers = urls_.size();
  return s;
}

}  // namespace lmcache::fleet
