#include "tier/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>

namespace lmcache::tier {
namespace {

using Digest = std::array<unsigned char, 32>;

std::string Hex(std::span<const unsigned char> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

Digest Hmac(std::span<const unsigned char> key, std::string_view data) {
  Digest out{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &length);
  return out;
}

std::span<const unsigned char> AsBytes(std::string_view text) {
  return {reinterpret_cast<const unsigned char*>(text.data()), text.size()};
}

std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// A header value as signed: leading and trailing spaces dropped, inner runs
// of spaces made one.
std::string Trimmed(std::string_view value) {
  std::string out;
  bool space = false;
  for (const char c : value) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> CanonicalHeaders(const SigV4Request& request) {
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(request.headers.size());
  for (const auto& [name, value] : request.headers)
    headers.emplace_back(Lower(name), Trimmed(value));
  std::sort(headers.begin(), headers.end());
  return headers;
}

std::string SignedHeaderNames(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string names;
  for (const auto& header : headers) names += (names.empty() ? "" : ";") + header.first;
  return names;
}

std::string Scope(std::string_view amz_date, std::string_view region, std::string_view service) {
  return std::string(amz_date.substr(0, 8)) + "/" + std::string(region) + "/" +
         std::string(service) + "/aws4_request";
}

}  // namespace

std::string UriEncode(std::string_view text, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

std::string AmzDate(std::chrono::system_clock::time_point when) {
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

std::string Sha256Hex(std::span<const std::byte> bytes) {
  Digest out{};
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), out.data(), &length, EVP_sha256(), nullptr);
  return Hex(out);
}

std::string Sha256Hex(std::string_view text) { return Sha256Hex(std::as_bytes(std::span(text))); }

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) {
    encoded.emplace_back(UriEncode(name, false), UriEncode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string joined;
  for (const auto& [name, value] : encoded) {
    joined += (joined.empty() ? "" : "&") + name + "=" + value;
  }
  return joined;
}

std::string CanonicalRequest(const SigV4Request& request) {
  const std::string canonical_query = CanonicalQuery(request.query);
  const auto headers = CanonicalHeaders(request);
  std::string canonical_headers;
  for (const auto& [name, value] : headers) canonical_headers += name + ":" + value + "\n";
  return std::string(request.method) + "\n" + request.canonical_uri + "\n" + canonical_query +
         "\n" + canonical_headers + "\n" + SignedHeaderNames(headers) + "\n" + request.payload_hash;
}

std::string StringToSign(const SigV4Request& request, std::string_view amz_date,
                         std::string_view region, std::string_view service) {
  return "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + Scope(amz_date, region, service) +
         "\n" + Sha256Hex(CanonicalRequest(request));
}

std::string AuthorizationHeader(const SigV4Request& request, const S3Credentials& credentials,
                                std::string_view amz_date, std::string_view region,
                                std::string_view service) {
  const std::string secret = "AWS4" + credentials.secret_access_key;
  const Digest date_key = Hmac(AsBytes(secret), amz_date.substr(0, 8));
  const Digest region_key = Hmac(date_key, region);
  const Digest service_key = Hmac(region_key, service);
  const Digest signing_key = Hmac(service_key, "aws4_request");
  const Digest signature = Hmac(signing_key, StringToSign(request, amz_date, region, service));
  return "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" +
         Scope(amz_date, region, service) +
         ", SignedHeaders=" + SignedHeaderNames(CanonicalHeaders(request)) +
         ", Signature=" + Hex(signature);
}

}  // namespace lmcache::tier
