#include "common/mask_secrets.h"

#include <regex>

namespace lmcache {

std::string MaskSecrets(std::string_view value) {
  // scheme://user:password@  ->  scheme://user:***@
  static const std::regex kUserInfo(R"((://[^/:@\s"]*:)[^@/\s"]*@)");
  // "...password...": "value"  ->  "...": "***" (case-insensitive names)
  static const std::regex kSecretField(
      R"re(("[^"]*(password|passwd|secret|token|auth|credential)[^"]*"\s*:\s*)"(?:[^"\\]|\\.)*")re",
      std::regex::icase);
  std::string out = std::regex_replace(std::string(value), kUserInfo, "$1***@");
  return std::regex_replace(out, kSecretField, "$1\"***\"");
}

}  // namespace lmcache
