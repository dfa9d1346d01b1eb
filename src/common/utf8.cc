#include "common/utf8.h"

#include <cstdint>

namespace lmcache {
namespace {

// Length of the valid sequence starting at text[i], or 0 if it is invalid.
std::size_t ValidSequence(std::string_view text, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) return 1;
  std::size_t length = 0;
  std::uint32_t min = 0;
  std::uint32_t cp = 0;
  if ((b0 & 0xe0) == 0xc0) {
    length = 2, min = 0x80, cp = b0 & 0x1f;
  } else if ((b0 & 0xf0) == 0xe0) {
    length = 3, min = 0x800, cp = b0 & 0x0f;
  } else if ((b0 & 0xf8) == 0xf0) {
    length = 4, min = 0x10000, cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (text.size() - i < length) return 0;
  for (std::size_t j = 1; j < length; ++j) {
    const auto b = static_cast<unsigned char>(text[i + j]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return length;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    // ASCII runs are the common case: skip them a byte at a time without the
    // sequence decoder.
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t length = ValidSequence(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string RepairUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = ValidSequence(text, i);
    if (length == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

}  // namespace lmcache
