// FleetKey: the shared secret that servers of one fleet prove to each other
// before any of them locks an object, gives an address or an rkey to
// another (--p2p-auth-key-file; issue 42, docs/security.md "The fleet key").
//
// The file is read once at start and refused unless it is a regular file of
// 32 bytes to 64 KiB (symbolic links followed), owned by the server's user
// and closed to group and others (mode 0600 or 0400), or owned by root and
// readable at most by its group (0440: a Kubernetes Secret mounted with
// fsGroup): a key others can read authenticates nobody. Its bytes never cross the wire. From them two
// CurveZMQ key pairs are derived (HMAC-SHA256 of the key over a fixed label
// each): the fleet endpoint's server pair, and the one client pair that
// every member uses towards another; and under a third label the data key
// that the data channel's read requests are authenticated with. A CURVE handshake then proves the key
// both ways: a client without it cannot produce the client pair's secret,
// and a server without it cannot answer for the server pair's public key.
// The server checks the client's public key in constant time.
//
// Thread-safety: immutable after Load; any thread may read it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "lmcache/status.h"

namespace lmcache::fleet {

inline constexpr std::size_t kMinFleetKeyBytes = 32;
inline constexpr std::size_t kMaxFleetKeyBytes = 64 * 1024;

// A CurveZMQ key pair, each key 32 bytes in Z85 (40 characters), the form
// ZMQ's socket options take.
struct CurveKeyPair {
  std::string public_z85;
  std::string secret_z85;
};

class FleetKey {
 public:
  // Reads and checks `path` (see above); the refusal says what to change.
  static Result<FleetKey> Load(const std::string& path);
  // From key bytes already in memory (tests; at least kMinFleetKeyBytes).
  static Result<FleetKey> FromBytes(std::span<const std::uint8_t> key);

  // The fleet endpoint's own pair (its public key is every client's
  // curve_serverkey), and the pair members connect with.
  const CurveKeyPair& server() const { return server_; }
  const CurveKeyPair& client() const { return client_; }
  // The key the data channel's read requests carry a MAC under (UcxChannel).
  const std::array<std::uint8_t, 32>& data_key() const { return data_key_; }
  // Whether `public_key` (32 raw bytes, as ZAP hands it over) is the client
  // pair's public key; compared in constant time.
  bool IsMemberKey(std::span<const std::uint8_t> public_key) const;
  // A short fingerprint of the key (hex of the first 8 bytes of an HMAC over
  // a label of its own): lets two operators compare keys without showing them.
  const std::string& fingerprint() const { return fingerprint_; }
  // Whether every byte is printable text: a passphrase, far weaker than 32
  // random bytes (anyone who holds a fingerprint or a handshake can test
  // guesses offline). The server warns at start.
  bool looks_like_passphrase() const { return passphrase_; }

 private:
  FleetKey() = default;
  CurveKeyPair server_;
  CurveKeyPair client_;
  std::array<std::uint8_t, 32> client_public_{};
  std::array<std::uint8_t, 32> data_key_{};
  std::string fingerprint_;
  bool passphrase_ = false;
};

}  // namespace lmcache::fleet
