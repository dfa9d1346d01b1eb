#include "common/mask_secrets.h"

#include <regex>

namespace lmcache {
namespace {

// A field whose name says it holds a secret (case-insensitive).
bool SecretName(std::string_view name) {
  static const std::regex kSecret("password|passwd|secret|token|auth|credential",
                                  std::regex::icase);
  return std::regex_search(name.begin(), name.end(), kSecret);
}

// One URL as the resp adapter's parser reads it (tier/resp/resp_connection.cc,
// ParseRespUrl): the user info runs from "://" to the LAST '@' of the whole
// URL, so a password may hold ',', ' ', quotes, '/', ':' or '@'. It is masked
// whole: the user before the first ':' is kept, the rest becomes ***.
std::string MaskUrl(std::string_view url) {
  const std::size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const std::size_t start = scheme + 3;
  const std::size_t at = url.rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  const std::string_view user_info = url.substr(start, at - start);
  const std::size_t colon = user_info.find(':');
  std::string out(url.substr(0, start));
  if (colon != std::string_view::npos) out.append(user_info.substr(0, colon + 1));
  out.append("***");
  out.append(url.substr(at));
  return out;
}

// The end of the JSON string literal opening at `open` (the index of its
// closing quote; value.size() when it does not close).
std::size_t StringEnd(std::string_view value, std::size_t open) {
  for (std::size_t i = open + 1; i < value.size(); ++i) {
    if (value[i] == '\\') {
      ++i;
    } else if (value[i] == '"') {
      return i;
    }
  }
  return value.size();
}

// JSON, token by token (its whitespace and order kept byte for byte): every
// string value under a key named as a secret becomes "***", every other
// string value is masked as one URL. Strings are delimited by JSON's own
// quotes, never by a ',' or a space inside them.
std::string MaskJson(std::string_view value) {
  std::string out;
  bool secret = false;  // the values since the last key belong to a secret's key
  std::size_t i = 0;
  while (i < value.size()) {
    if (value[i] != '"') {
      out.push_back(value[i++]);
      continue;
    }
    const std::size_t close = StringEnd(value, i);
    const std::string_view content = value.substr(i + 1, close - i - 1);
    std::size_t next = close + 1;
    while (next < value.size() && (value[next] == ' ' || value[next] == '\t' ||
                                   value[next] == '\r' || value[next] == '\n')) {
      ++next;
    }
    const bool is_key = next < value.size() && value[next] == ':';
    out.push_back('"');
    if (is_key) {
      secret = SecretName(content);
      out.append(content);
    } else {
      out.append(secret ? std::string("***") : MaskUrl(content));
    }
    if (close < value.size()) out.push_back('"');
    i = close + 1;
  }
  return out;
}

}  // namespace

std::string MaskSecrets(std::string_view value) {
  const std::size_t first = value.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && (value[first] == '{' || value[first] == '[')) {
    return MaskJson(value);
  }
  return MaskUrl(value);
}

}  // namespace lmcache
