// PeerSource: where a server learns its peers, parsed from `--p2p-peers`: a
// fixed peer (`tcp://HOST:PORT`, a peer's fleet endpoint as it advertises it), every
// address a name resolves to (`dns://NAME:PORT`, re-resolved: a Kubernetes
// headless Service over a DaemonSet), or an etcd prefix the peers register
// under (`etcd://HOST:PORT/PREFIX`). The list is operator input: every entry
// is checked whole, and a refusal names the entry and what to change.
//
// Thread-safety: plain functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::fleet {

enum class PeerSourceKind : std::uint8_t { kTcp, kDns, kEtcd };

struct PeerSource {
  PeerSourceKind kind = PeerSourceKind::kTcp;
  std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
  std::uint16_t port = 0;
  std::string prefix;  // kEtcd only: the key prefix, starting with '/'

  // The entry as an operator writes it (brackets restored around IPv6).
  std::string ToString() const;
  friend bool operator==(const PeerSource&, const PeerSource&) = default;
};

// Parses a comma-separated list (spaces around entries allowed; an empty
// list means no peers). Refuses an unknown scheme, a missing or zero port,
// a port beyond 65535, a host that is not a DNS name or an IP address, a
// tcp or dns entry with a path, an etcd entry without a prefix, and an
// entry named twice.
Result<std::vector<PeerSource>> ParsePeerSources(std::string_view list);

}  // namespace lmcache::fleet
