#include "common/mask_secrets.h"

#include <regex>

namespace lmcache {
namespace {

// Every URL's user info ("scheme://USERINFO@host"): the password after the
// user's colon, or the whole of it when there is no colon (redis://SECRET@h
// is a password alone), becomes ***. The authority runs to the first quote,
// space or comma, and its user info to the last @ in it: a resp URL's
// password may hold '/' or '@' (the reference's parser splits at the last @).
std::string MaskUserInfo(std::string_view value) {
  std::string out;
  std::size_t from = 0;
  while (true) {
    const std::size_t scheme = value.find("://", from);
    if (scheme == std::string_view::npos) break;
    const std::size_t start = scheme + 3;
    std::size_t end = value.find_first_of("\"' \t\r\n,", start);
    if (end == std::string_view::npos) end = value.size();
    const std::string_view authority = value.substr(start, end - start);
    const std::size_t at = authority.rfind('@');
    out.append(value.substr(from, start - from));
    if (at == std::string_view::npos) {
      out.append(authority);
    } else {
      const std::string_view user_info = authority.substr(0, at);
      const std::size_t colon = user_info.find(':');
      if (colon != std::string_view::npos) out.append(user_info.substr(0, colon + 1));
      out.append("***");
      out.append(authority.substr(at));
    }
    from = end;
  }
  out.append(value.substr(from));
  return out;
}

}  // namespace

std::string MaskSecrets(std::string_view value) {
  // "...password...": "value"  ->  "...": "***" (case-insensitive names)
  static const std::regex kSecretField(
      R"re(("[^"]*(password|passwd|secret|token|auth|credential)[^"]*"\s*:\s*)"(?:[^"\\]|\\.)*")re",
      std::regex::icase);
  return std::regex_replace(MaskUserInfo(value), kSecretField, "$1\"***\"");
}

}  // namespace lmcache
