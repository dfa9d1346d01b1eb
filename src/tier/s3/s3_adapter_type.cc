// The `s3` L2 adapter type: its `--l2-adapter` fields and its factory
// (registered through l2_adapter_types.h; src/CMakeLists.txt lists it).
//
// The reference's fields (lmcache/v1/distributed/l2_adapters/s3_l2_adapter.py)
// are taken as it defines them: s3_endpoint ("s3://<bucket>.<host>" or
// "<bucket>.<host>": virtual-hosted), s3_region, s3_num_io_threads (here:
// the most connections open at once), s3_prefer_http2, s3_enable_s3express
// (refused when true), disable_tls, aws_access_key_id,
// aws_secret_access_key, max_capacity_gb. Ours: an endpoint URL
// ("http[s]://host[:port]") with `bucket` and `s3_addressing` ("path", the
// default for a URL, or "virtual"), aws_session_token, key_prefix,
// ca_bundle, request_timeout_ms, connect_timeout_ms, max_retries,
// retry_interval_ms and max_listed_objects.
#include <cstdlib>
#include <memory>
#include <string>

#include "tier/l2_config.h"
#include "tier/l2_config_fields.h"
#include "tier/s3/s3_adapter.h"
#include "tier/s3/s3_credentials.h"

namespace lmcache::tier {
namespace {

// Fills the client's scheme, host, bucket and addressing from s3_endpoint.
Status ParseEndpoint(L2ConfigFields& f, bool disable_tls, S3ClientConfig* c) {
  LMC_ASSIGN_OR_RETURN(std::string endpoint, f.String("s3_endpoint", true));
  if (endpoint.empty()) return f.Error("s3_endpoint", "must not be empty");
  while (endpoint.ends_with('/')) endpoint.pop_back();
  const bool url = endpoint.starts_with("http://") || endpoint.starts_with("https://");
  if (url) {
    c->scheme = endpoint.starts_with("https://") ? "https" : "http";
    if (disable_tls && c->scheme == "https") {
      return f.Error("disable_tls", "is true but s3_endpoint is an https:// URL");
    }
    c->host = endpoint.substr(c->scheme.size() + 3);
    LMC_ASSIGN_OR_RETURN(c->bucket, f.String("bucket", true));
    LMC_ASSIGN_OR_RETURN(const std::string addressing, f.String("s3_addressing", false));
    if (addressing.empty() || addressing == "path") {
      c->virtual_hosted = false;
    } else if (addressing == "virtual") {
      c->virtual_hosted = true;
    } else {
      return f.Error("s3_addressing", "must be \"path\" or \"virtual\"");
    }
  } else {
    // The reference's form: the bucket is the host's first label.
    if (endpoint.starts_with("s3://")) endpoint = endpoint.substr(5);
    const std::size_t dot = endpoint.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == endpoint.size()) {
      return f.Error("s3_endpoint",
                     "must be \"s3://<bucket>.<host>\", \"<bucket>.<host>\" (virtual-hosted, as "
                     "the reference takes it) or an http(s):// URL with \"bucket\"");
    }
    if (f.Has("bucket") || f.Has("s3_addressing")) {
      return f.Error("bucket", "goes with an http(s):// s3_endpoint; this one names its bucket");
    }
    c->scheme = disable_tls ? "http" : "https";
    c->bucket = endpoint.substr(0, dot);
    c->host = endpoint.substr(dot + 1);
    c->virtual_hosted = true;
  }
  if (c->host.empty() || c->host.find_first_of("/?#@ ") != std::string::npos) {
    return f.Error("s3_endpoint", "has no host, or a path, query or user info after it");
  }
  if (c->bucket.size() < 3 || c->bucket.size() > 63 ||
      c->bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos) {
    return f.Error(url ? "bucket" : "s3_endpoint",
                   "the bucket name \"" + c->bucket +
                       "\" is not a valid S3 bucket name (3-63 of a-z, 0-9, '.', '-')");
  }
  return Status::Ok();
}

Result<S3Credentials> ConfiguredCredentials(L2ConfigFields& f) {
  S3Credentials c;
  LMC_ASSIGN_OR_RETURN(c.access_key_id, f.String("aws_access_key_id", false));
  LMC_ASSIGN_OR_RETURN(c.secret_access_key, f.String("aws_secret_access_key", false));
  LMC_ASSIGN_OR_RETURN(c.session_token, f.String("aws_session_token", false));
  return c;
}

Result<S3AdapterConfig> ParseS3(L2ConfigFields& f) {
  S3AdapterConfig config;
  S3ClientConfig& c = config.client;
  LMC_ASSIGN_OR_RETURN(const bool disable_tls, f.Bool("disable_tls", false));
  LMC_RETURN_IF_ERROR(ParseEndpoint(f, disable_tls, &c));
  LMC_ASSIGN_OR_RETURN(c.region, f.String("s3_region", true));
  if (c.region.empty()) return f.Error("s3_region", "must not be empty (e.g. \"us-east-1\")");
  LMC_ASSIGN_OR_RETURN(const double threads, f.Number("s3_num_io_threads", 64, 1, 4096));
  c.max_connections = static_cast<std::uint32_t>(threads);
  LMC_ASSIGN_OR_RETURN(c.prefer_http2, f.Bool("s3_prefer_http2", true));
  LMC_ASSIGN_OR_RETURN(const bool express, f.Bool("s3_enable_s3express", false));
  if (express) {
    return f.Error("s3_enable_s3express",
                   "S3 Express One Zone (directory buckets, session signing) is not supported by "
                   "this server; use a general-purpose bucket and set it false");
  }
  LMC_ASSIGN_OR_RETURN(const double gb, f.Number("max_capacity_gb", 0, 0, 1e9));
  config.max_capacity_bytes = static_cast<std::uint64_t>(gb * kConfigGiB);
  LMC_ASSIGN_OR_RETURN(config.key_prefix, f.String("key_prefix", false));
  LMC_ASSIGN_OR_RETURN(c.ca_bundle, f.String("ca_bundle", false));
  LMC_ASSIGN_OR_RETURN(const double request, f.Number("request_timeout_ms", 5000, 1, 600'000));
  c.request_timeout = std::chrono::milliseconds(static_cast<long>(request));
  LMC_ASSIGN_OR_RETURN(const double connect, f.Number("connect_timeout_ms", 1000, 1, 600'000));
  c.connect_timeout = std::chrono::milliseconds(static_cast<long>(connect));
  LMC_ASSIGN_OR_RETURN(const double retries, f.Number("max_retries", 3, 0, 20));
  c.max_attempts = static_cast<std::uint32_t>(retries) + 1;
  LMC_ASSIGN_OR_RETURN(const double interval, f.Number("retry_interval_ms", 1000, 10, 600'000));
  c.retry_interval = std::chrono::milliseconds(static_cast<long>(interval));
  LMC_ASSIGN_OR_RETURN(const double listed, f.Number("max_listed_objects", 1'000'000, 0, 1e9));
  config.max_listed_objects = static_cast<std::uint64_t>(listed);

  LMC_ASSIGN_OR_RETURN(const S3Credentials configured, ConfiguredCredentials(f));
  auto resolved =
      ResolveS3Credentials(configured, [](const char* name) { return std::getenv(name); });
  if (!resolved.ok()) return f.Error("aws_access_key_id", resolved.status().message());
  c.credentials = resolved->credentials;
  config.credentials_source = resolved->source;
  return config;
}

}  // namespace

void RegisterS3AdapterType(L2AdapterTypes& types) {
  types.Add(TypedL2AdapterType<S3AdapterConfig>(
      "s3", {}, [](L2ConfigFields& f, L2AdapterSpec*) { return ParseS3(f); },
      [](const S3AdapterConfig& config) -> Result<std::unique_ptr<L2Adapter>> {
        LMC_ASSIGN_OR_RETURN(auto adapter, S3Adapter::Create(config));
        return std::unique_ptr<L2Adapter>(std::move(adapter));
      }));
}

}  // namespace lmcache::tier
