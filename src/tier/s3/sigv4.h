// SigV4: AWS Signature Version 4 for S3 requests (the Authorization header
// an S3 server checks), as AWS's "Signature Calculations for the
// Authorization Header" defines it: a canonical request (method, URI, sorted
// query, sorted signed headers, payload hash), a string to sign over its
// SHA-256 and the credential scope, and an HMAC-SHA256 signing key derived
// from the secret, the date, the region and the service.
//
// S3 differs from the other services in two ways this follows: the path is
// URI-encoded once, '/' kept (never normalised), and every request carries
// x-amz-content-sha256 (the payload's SHA-256, or UNSIGNED-PAYLOAD: our
// objects carry their own checksum, so a 4 MiB PUT is not hashed twice).
//
// Thread-safety: pure functions.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lmcache::tier {

inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials (STS) only
  bool empty() const { return access_key_id.empty() || secret_access_key.empty(); }
};

// One request as it is signed. `canonical_uri` is the path as sent (already
// encoded with UriEncode(path, false)); `query` is the decoded parameters
// (sorted and encoded here); `headers` are every header to sign, names in
// any case (host and x-amz-date among them).
struct SigV4Request {
  std::string_view method;
  std::string canonical_uri;
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;  // hex SHA-256 of the body, or kUnsignedPayload
};

// RFC 3986 unreserved characters kept, every other byte %XX (upper case);
// '/' kept when `keep_slash` (an object name in a path).
std::string UriEncode(std::string_view text, bool keep_slash);
// "20130524T000000Z": the x-amz-date of `when`.
std::string AmzDate(std::chrono::system_clock::time_point when);
std::string Sha256Hex(std::span<const std::byte> bytes);
std::string Sha256Hex(std::string_view text);

// The query as signed and as sent: each name and value encoded, sorted,
// joined with '&'.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

// The canonical request and the string to sign, exposed for the tests that
// check each step against AWS's published examples.
std::string CanonicalRequest(const SigV4Request& request);
std::string StringToSign(const SigV4Request& request, std::string_view amz_date,
                         std::string_view region, std::string_view service);
// The Authorization header's value:
//   AWS4-HMAC-SHA256 Credential=<id>/<date>/<region>/<service>/aws4_request,
//   SignedHeaders=<names;...>, Signature=<hex>
std::string AuthorizationHeader(const SigV4Request& request, const S3Credentials& credentials,
                                std::string_view amz_date, std::string_view region,
                                std::string_view service);

}  // namespace lmcache::tier
