// PeerSource: the `--p2p-peers` list (peer_source.h).
#include "fleet/peer_source.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include "common/host_port.h"

namespace lmcache::fleet {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

bool IsIpAddress(const std::string& host, int family) {
  unsigned char buffer[16];
  return inet_pton(family, host.c_str(), buffer) == 1;
}

// RFC 1123 host names: labels of letters, digits and inner hyphens, each
// 1-63 bytes, 253 in all.
bool IsDnsName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  std::size_t label = 0;
  for (std::size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      if (label == 0 || label > 63 || name[i - 1] == '-' || name[i - label] == '-') return false;
      label = 0;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (!std::isalnum(c) && c != '-') return false;
    label += 1;
  }
  return true;
}

// 'text', built by appending (GCC 12 warns falsely on "'" + std::string).
std::string Quoted(std::string_view text) {
  std::string quoted;
  quoted.reserve(text.size() + 2);
  quoted.append("'").append(text).append("'");
  return quoted;
}

Status Refuse(std::string_view entry, const std::string& why) {
  return InvalidArgument("--p2p-peers entry " + Quoted(entry) + ": " + why);
}

// "HOST:PORT" or "[V6]:PORT" into `source`: a port is required, and the
// host must be a DNS name or an IP address.
Status ParseHostPortOf(std::string_view entry, std::string_view authority, PeerSource* source) {
  auto parsed = ParseHostPort(authority);
  if (!parsed.ok()) return Refuse(entry, parsed.status().message());
  const bool bracketed = authority.starts_with('[');
  if (bracketed && !IsIpAddress(parsed->host, AF_INET6)) {
    return Refuse(entry, Quoted(parsed->host) + " is not an IPv6 address");
  }
  if (!bracketed && parsed->host.find(':') != std::string::npos) {
    return Refuse(entry, "write an IPv6 peer in brackets: [ADDRESS]:PORT");
  }
  if (!bracketed && !IsIpAddress(parsed->host, AF_INET) && !IsDnsName(parsed->host)) {
    return Refuse(entry, Quoted(parsed->host) + " is neither a host name nor an address");
  }
  source->host = std::move(parsed->host);
  source->port = parsed->port;
  return Status::Ok();
}

Result<PeerSource> ParseOne(std::string_view entry) {
  PeerSource source;
  std::string_view rest;
  if (entry.starts_with("tcp://")) {
    source.kind = PeerSourceKind::kTcp;
    rest = entry.substr(6);
  } else if (entry.starts_with("dns://")) {
    source.kind = PeerSourceKind::kDns;
    rest = entry.substr(6);
  } else if (entry.starts_with("etcd://")) {
    source.kind = PeerSourceKind::kEtcd;
    rest = entry.substr(7);
  } else {
    return Refuse(entry,
                  "start it with tcp://HOST:PORT, dns://NAME:PORT or etcd://HOST:PORT/PREFIX");
  }
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  LMC_RETURN_IF_ERROR(ParseHostPortOf(entry, authority, &source));
  if (source.kind == PeerSourceKind::kEtcd) {
    if (slash == std::string_view::npos || slash + 1 == rest.size()) {
      return Refuse(entry, "name the key prefix the peers register under: etcd://HOST:PORT/PREFIX");
    }
    source.prefix = std::string(rest.substr(slash));
  } else if (slash != std::string_view::npos) {
    return Refuse(entry, "a tcp or dns peer takes no path: remove " + Quoted(rest.substr(slash)));
  }
  if (source.kind == PeerSourceKind::kDns &&
      (IsIpAddress(source.host, AF_INET) || IsIpAddress(source.host, AF_INET6))) {
    return Refuse(entry, "dns:// needs a name to resolve; write tcp:// for an address");
  }
  return source;
}

}  // namespace

std::string PeerSource::ToString() const {
  std::string text = kind == PeerSourceKind::kTcp   ? "tcp://"
                     : kind == PeerSourceKind::kDns ? "dns://"
                                                    : "etcd://";
  return text.append(HostPort{host, port}.ToString()).append(prefix);
}

Result<std::vector<PeerSource>> ParsePeerSources(std::string_view list) {
  std::vector<PeerSource> sources;
  if (Trim(list).empty()) return sources;
  while (true) {
    const std::size_t comma = list.find(',');
    const std::string_view entry = Trim(list.substr(0, comma));
    if (entry.empty())
      return InvalidArgument("--p2p-peers has an empty entry: remove the extra comma");
    LMC_ASSIGN_OR_RETURN(PeerSource source, ParseOne(entry));
    if (std::find(sources.begin(), sources.end(), source) != sources.end()) {
      return Refuse(entry, "named twice: list each peer once");
    }
    sources.push_back(std::move(source));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return sources;
}

}  // namespace lmcache::fleet
