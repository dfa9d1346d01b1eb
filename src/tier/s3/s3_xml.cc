#include "tier/s3/s3_xml.h"

#include <charconv>
#include <ctime>
#include <optional>

namespace lmcache::tier {
namespace {

Status Malformed(std::string_view what) {
  return Status(ErrorCode::kMalformedRequest, "S3 reply: " + std::string(what));
}

// The raw text of the first <tag>...</tag> in `xml` (nullopt when absent).
// Tags are matched exactly: the S3 replies we read carry no attributes on
// the elements we want, and a self-closing <tag/> is an empty value.
std::optional<std::string_view> Element(std::string_view xml, std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string empty = "<" + std::string(tag) + "/>";
  const std::size_t at = xml.find(open);
  const std::size_t at_empty = xml.find(empty);
  if (at_empty != std::string_view::npos && (at == std::string_view::npos || at_empty < at)) {
    return std::string_view();
  }
  if (at == std::string_view::npos) return std::nullopt;
  const std::size_t begin = at + open.size();
  const std::size_t end = xml.find("</" + std::string(tag) + ">", begin);
  if (end == std::string_view::npos) return std::nullopt;
  return xml.substr(begin, end - begin);
}

Result<std::uint64_t> ParseSize(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return Malformed("a <Size> is not a number");
  }
  return value;
}

Result<ListedS3Object> ParseContents(std::string_view block) {
  ListedS3Object object;
  const auto name = Element(block, "Key");
  if (!name) return Malformed("a <Contents> has no <Key>");
  LMC_ASSIGN_OR_RETURN(object.name, XmlUnescape(*name));
  if (const auto size = Element(block, "Size")) {
    LMC_ASSIGN_OR_RETURN(object.size_bytes, ParseSize(*size));
  }
  if (const auto time = Element(block, "LastModified")) {
    LMC_ASSIGN_OR_RETURN(object.last_modified_ms, ParseS3Time(*time));
  }
  return object;
}

bool ParseInt(std::string_view text, int* out) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && error == std::errc() && end == text.data() + text.size();
}

}  // namespace

Result<std::string> XmlUnescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] != '&') {
      out.push_back(text[i++]);
      continue;
    }
    const std::size_t end = text.find(';', i);
    if (end == std::string_view::npos || end - i > 10) return Malformed("an unterminated entity");
    const std::string_view entity = text.substr(i + 1, end - i - 1);
    i = end + 1;
    if (entity == "amp")
      out.push_back('&');
    else if (entity == "lt")
      out.push_back('<');
    else if (entity == "gt")
      out.push_back('>');
    else if (entity == "quot")
      out.push_back('"');
    else if (entity == "apos")
      out.push_back('\'');
    else if (entity.size() > 1 && entity[0] == '#') {
      const bool hex = entity[1] == 'x';
      std::uint32_t code = 0;
      const std::string_view digits = entity.substr(hex ? 2 : 1);
      const auto [stop, error] =
          std::from_chars(digits.data(), digits.data() + digits.size(), code, hex ? 16 : 10);
      if (digits.empty() || error != std::errc() || stop != digits.data() + digits.size() ||
          code == 0 || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
        return Malformed("a bad character reference");
      }
      // UTF-8 of the code point.
      if (code < 0x80) {
        out.push_back(static_cast<char>(code));
      } else if (code < 0x800) {
        out.push_back(static_cast<char>(0xC0 | code >> 6));
        out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
      } else if (code < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | code >> 12));
        out.push_back(static_cast<char>(0x80 | (code >> 6 & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
      } else {
        out.push_back(static_cast<char>(0xF0 | code >> 18));
        out.push_back(static_cast<char>(0x80 | (code >> 12 & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (code >> 6 & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
      }
    } else {
      return Malformed("an unknown entity");
    }
  }
  return out;
}

Result<std::int64_t> ParseS3Time(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS[.fff]Z
  if (text.size() < 20 || text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' ||
      text[16] != ':' || text.back() != 'Z') {
    return Malformed("a time is not ISO 8601");
  }
  std::tm when{};
  int fields[6];
  const std::size_t at[6] = {0, 5, 8, 11, 14, 17};
  const std::size_t width[6] = {4, 2, 2, 2, 2, 2};
  for (int f = 0; f < 6; ++f) {
    if (!ParseInt(text.substr(at[f], width[f]), &fields[f]))
      return Malformed("a time is not ISO 8601");
  }
  if (fields[1] < 1 || fields[1] > 12 || fields[2] < 1 || fields[2] > 31 || fields[3] > 23 ||
      fields[4] > 59 || fields[5] > 60) {
    return Malformed("a time is out of range");
  }
  when.tm_year = fields[0] - 1900;
  when.tm_mon = fields[1] - 1;
  when.tm_mday = fields[2];
  when.tm_hour = fields[3];
  when.tm_min = fields[4];
  when.tm_sec = fields[5];
  int millis = 0;
  const std::string_view rest = text.substr(19, text.size() - 20);
  if (!rest.empty()) {
    if (rest[0] != '.' || rest.size() < 2) return Malformed("a time is not ISO 8601");
    const std::string_view digits = rest.substr(1, 3);
    if (!ParseInt(digits, &millis)) return Malformed("a time is not ISO 8601");
    for (std::size_t pad = digits.size(); pad < 3; ++pad) millis *= 10;
  }
  return static_cast<std::int64_t>(timegm(&when)) * 1000 + millis;
}

Result<S3ListPage> ParseListObjectsV2(std::string_view xml) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    return Malformed("not a ListBucketResult");
  }
  S3ListPage page;
  std::size_t at = 0;
  while (true) {
    const std::size_t begin = xml.find("<Contents>", at);
    if (begin == std::string_view::npos) break;
    const std::size_t end = xml.find("</Contents>", begin);
    if (end == std::string_view::npos) return Malformed("an unterminated <Contents>");
    LMC_ASSIGN_OR_RETURN(ListedS3Object object,
                         ParseContents(xml.substr(begin + 10, end - begin - 10)));
    page.objects.push_back(std::move(object));
    at = end + 11;
  }
  // The page's own fields (before its objects in RGW's replies, after them
  // in AWS's): a name inside a <Key> is escaped, so it cannot read as one.
  const auto truncated = Element(xml, "IsTruncated");
  page.truncated = truncated && *truncated == "true";
  if (page.truncated) {
    const auto token = Element(xml, "NextContinuationToken");
    if (!token || token->empty()) return Malformed("a truncated page with no continuation token");
    LMC_ASSIGN_OR_RETURN(page.next_continuation_token, XmlUnescape(*token));
  }
  return page;
}

S3Error ParseS3Error(std::string_view xml) {
  S3Error error;
  const auto body = Element(xml, "Error");
  if (!body) return error;
  if (const auto code = Element(*body, "Code")) {
    if (auto text = XmlUnescape(*code); text.ok()) error.code = std::move(text).value();
  }
  if (const auto message = Element(*body, "Message")) {
    if (auto text = XmlUnescape(*message); text.ok()) error.message = std::move(text).value();
  }
  return error;
}

}  // namespace lmcache::tier
