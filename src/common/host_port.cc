// HostPort (host_port.h).
#include "common/host_port.h"

#include <charconv>

namespace lmcache {
namespace {

Result<std::uint16_t> ParsePort(std::string_view text) {
  unsigned value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value == 0 ||
      value > 65535) {
    std::string why = "the port must be a number in 1..65535, got '";
    why.append(text).append("'");
    return InvalidArgument(std::move(why));
  }
  return static_cast<std::uint16_t>(value);
}

}  // namespace

std::string HostPort::ToString() const {
  std::string text;
  const bool v6 = host.find(':') != std::string::npos;
  text.append(v6 ? "[" : "").append(host).append(v6 ? "]" : "");
  return text.append(":").append(std::to_string(port));
}

Result<HostPort> ParseHostPort(std::string_view text, std::uint16_t default_port) {
  HostPort parsed;
  std::string_view host = text;
  std::string_view port;
  bool has_port = false;
  if (text.starts_with('[')) {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return InvalidArgument("unterminated [IPv6 address]");
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return InvalidArgument("write an IPv6 host as [ADDRESS]:PORT");
      port = rest.substr(1);
      has_port = true;
    }
  } else if (const std::size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    has_port = true;
  }
  if (host.empty()) return InvalidArgument("no host");
  parsed.host = std::string(host);
  if (has_port) {
    LMC_ASSIGN_OR_RETURN(parsed.port, ParsePort(port));
  } else if (default_port != 0) {
    parsed.port = default_port;
  } else {
    return InvalidArgument("add the port: HOST:PORT");
  }
  return parsed;
}

}  // namespace lmcache
